/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* What the daemon's three files share: daemon.c (lifecycle), daemon_loop.c
 * (the event loop and the tick), daemon_cmd.c (the control socket's
 * replies and subscribers). Private to them. */
#ifndef KT_DAEMON_INT_H
#define KT_DAEMON_INT_H

#include <stddef.h>
#include <stdint.h>
#include "base/evloop.h"
#include "control/ctlserver.h"

struct kt_daemon;

/* daemon_cmd.c */
extern const struct kt_ctl_ops kt_daemon_ctl_ops;
/* Subscribers of limit i: "throttled" at its first refusal after a quiet
 * spell, "resumed" once no refusal was reported for two ticks. */
void kt_daemon_notify_subscribers(struct kt_daemon *d, int i, uint64_t now);

/* daemon_loop.c */
/* Every watch unregistered, with its callback (the start's first step). */
void kt_daemon_init_watches(struct kt_daemon *d);
/* Signals, the tick timer, the control socket, the pods watcher, the
 * metrics endpoint, throttle events, store answers, strict permits, tag
 * limits and cgroup directories, watched; err one line. */
int kt_daemon_setup_loop(struct kt_daemon *d, char *err, size_t errlen);
/* Takes w out of the loop before its owner closes the fd. */
void kt_daemon_unwatch(struct kt_daemon *d, struct kt_watch *w, const char *what);
/* The store's answers, the strict limits' timer, the tag limits: watched
 * anew after a reload replaced their fds (optional: logged on failure). */
void kt_daemon_watch_pool(struct kt_daemon *d);
void kt_daemon_watch_strict(struct kt_daemon *d);
void kt_daemon_watch_tags(struct kt_daemon *d);
/* One controller tick, counted for status. */
void kt_daemon_tick(struct kt_daemon *d, uint64_t now);

/* daemon.c */
/* The controller's view of the daemon, rebound after start and reload. */
void kt_daemon_bind_controller(struct kt_daemon *d);
/* A reload because the config file changed on disk (the watcher's). */
int kt_daemon_reload_changed(struct kt_daemon *d, char *err, size_t errlen);

#endif
