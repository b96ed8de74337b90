/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The kernel features kthrottled probes: see features.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>
#include <bpf/libbpf.h>
#include "kernel/features.h"
#include "base/log.h"
#include "kthrottle.h"

static const struct {
	const char *name;
	const char *effect;
} feats[KT_FEAT_COUNT] = {
	[KT_FEAT_CONNECT] = { "connect", "connection and in-flight limits are not enforced" },
	[KT_FEAT_SENDMSG] = { "sendmsg", "datagram limits are not enforced" },
	[KT_FEAT_EGRESS] = { "egress",
			     "packet and byte limits are not enforced, nor datagram limits on connected UDP" },
	[KT_FEAT_SOCK] = { "sock",
			   "raw sockets are not refused, in-flight limits are not enforced (no slot would come back)" },
	[KT_FEAT_SOCKOPS] = { "sockops",
			      "TCP under byte limits is held by drops instead of paced; in-flight slots come back only at close; a call limit's maxDelay is not applied (held calls wait until admitted)" },
	[KT_FEAT_AUDIT] = { "inflight_audit", "in-flight open counts are not audited" },
	[KT_FEAT_RINGBUF] = { "ringbuf", "no throttle events (counters still count)" },
	[KT_FEAT_FQ] = { "fq", "TCP under byte limits is held by drops instead of paced at exact departure times" },
};

const char *kt_feature_name(enum kt_feature f)
{
	return (unsigned)f < KT_FEAT_COUNT ? feats[f].name : "?";
}

const char *kt_feature_effect(enum kt_feature f)
{
	return (unsigned)f < KT_FEAT_COUNT ? feats[f].effect : "?";
}

bool kt_features_set(struct kt_features *fs, enum kt_feature f, bool on, const char *why)
{
	struct kt_feature_state *st;
	enum kt_feat_state want = on ? KT_FEAT_ON : KT_FEAT_OFF;
	bool changed;

	if ((unsigned)f >= KT_FEAT_COUNT)
		return false;
	st = &fs->f[f];
	changed = st->state != want;
	st->state = want;
	kt_one_line(st->why, sizeof(st->why), on || !why ? "" : why);
	return changed;
}

bool kt_feature_on(const struct kt_features *fs, enum kt_feature f)
{
	return (unsigned)f < KT_FEAT_COUNT && fs->f[f].state == KT_FEAT_ON;
}

#define BIT(f) (1u << (f))

unsigned kt_unit_needs(unsigned unit)
{
	switch (unit) {
	case KT_UNIT_CONNECTION:
		return BIT(KT_FEAT_CONNECT);
	case KT_UNIT_CONCURRENT:
		return BIT(KT_FEAT_CONNECT) | BIT(KT_FEAT_SOCK);
	case KT_UNIT_DATAGRAM:
		return BIT(KT_FEAT_SENDMSG);
	case KT_UNIT_PACKET:
	case KT_UNIT_BYTE:
	case KT_UNIT_CALL:
		return BIT(KT_FEAT_EGRESS);
	default: /* request: libkthrottle, no program */
		return 0;
	}
}

unsigned kt_unit_uses(unsigned unit, bool allow_raw_sockets, bool max_delay)
{
	unsigned m = 0;

	if (unit == KT_UNIT_REQUEST)
		return 0;
	if (!allow_raw_sockets)
		m |= BIT(KT_FEAT_SOCK);
	if (unit == KT_UNIT_DATAGRAM)
		m |= BIT(KT_FEAT_EGRESS);
	if (unit == KT_UNIT_BYTE)
		m |= BIT(KT_FEAT_SOCKOPS) | BIT(KT_FEAT_FQ);
	if (unit == KT_UNIT_CONCURRENT)
		m |= BIT(KT_FEAT_SOCKOPS) | BIT(KT_FEAT_AUDIT);
	if (unit == KT_UNIT_CALL && max_delay)
		m |= BIT(KT_FEAT_SOCKOPS);
	return m;
}

enum kt_feature kt_features_first_off(const struct kt_features *fs, unsigned mask)
{
	for (int f = 0; f < KT_FEAT_COUNT; f++)
		if ((mask & BIT(f)) && fs->f[f].state == KT_FEAT_OFF)
			return (enum kt_feature)f;
	return KT_FEAT_COUNT;
}

int kt_features_off(const struct kt_features *fs)
{
	int n = 0;

	for (int f = 0; f < KT_FEAT_COUNT; f++)
		n += fs->f[f].state == KT_FEAT_OFF;
	return n;
}

bool kt_feature_refused_by_env(enum kt_feature f)
{
	const char *env = getenv(KT_REFUSE_ENV), *p;
	size_t n = strlen(kt_feature_name(f));

	for (p = env; p && *p; p += strcspn(p, ","), p += *p == ',')
		if (strcspn(p, ",") == n && !strncmp(p, kt_feature_name(f), n))
			return true;
	return false;
}

/* Whether the running kernel has qdisc `mod` (sch_fq): loaded or built in
 * (/sys/module), or a module it can load (modules.dep of its release). */
static bool have_module(const char *mod, char *why, size_t len)
{
	char p[512], line[1024], want[80];
	struct utsname u;
	FILE *f;
	bool found = false;

	snprintf(p, sizeof(p), "/sys/module/%s", mod);
	if (access(p, F_OK) == 0)
		return true;
	if (uname(&u) < 0) {
		snprintf(why, len, "uname: %s", strerror(errno));
		return false;
	}
	snprintf(want, sizeof(want), "/%s.ko", mod);
	const char *lists[] = { "modules.builtin", "modules.dep" };
	for (size_t i = 0; i < 2 && !found; i++) {
		snprintf(p, sizeof(p), "/lib/modules/%s/%s", u.release, lists[i]);
		f = fopen(p, "r");
		if (!f)
			continue;
		while (!found && fgets(line, sizeof(line), f)) {
			char *colon = strchr(line, ':'), *end = colon ? colon : line + strcspn(line, "\n");

			*end = 0;
			found = strstr(line, want) != NULL;
		}
		fclose(f);
	}
	if (!found)
		snprintf(why, len, "kernel %s has no %s (not in /sys/module nor in its modules.builtin or modules.dep)",
			 u.release, mod);
	return found;
}

void kt_features_probe_kernel(struct kt_features *fs)
{
	char why[240] = "";
	int r;

	r = kt_feature_refused_by_env(KT_FEAT_RINGBUF) ? -EPERM
							: libbpf_probe_bpf_map_type(BPF_MAP_TYPE_RINGBUF, NULL);
	if (r < 0)
		snprintf(why, sizeof(why), "BPF ring buffer probe: %s", strerror(-r));
	else if (r == 0)
		snprintf(why, sizeof(why), "the kernel has no BPF ring buffer (Linux 5.8)");
	kt_features_set(fs, KT_FEAT_RINGBUF, r == 1, why);
	why[0] = 0;
	if (kt_feature_refused_by_env(KT_FEAT_FQ)) {
		snprintf(why, sizeof(why), "refused (" KT_REFUSE_ENV ")");
		kt_features_set(fs, KT_FEAT_FQ, false, why);
	} else {
		bool fq = have_module("sch_fq", why, sizeof(why));

		kt_features_set(fs, KT_FEAT_FQ, fq, why);
	}
}

int kt_features_check_minimum(char *err, size_t errlen)
{
	static const struct {
		enum bpf_prog_type type;
		enum bpf_func_id helper;
		const char *name, *since;
	} need[] = {
		{ BPF_PROG_TYPE_CGROUP_SKB, BPF_FUNC_loop, "bpf_loop", "5.17" },
		{ BPF_PROG_TYPE_CGROUP_SOCK_ADDR, BPF_FUNC_set_retval, "bpf_set_retval", "5.18" },
	};
	struct utsname u;

	if (uname(&u) < 0)
		snprintf(u.release, sizeof(u.release), "?");
	for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++) {
		int r = libbpf_probe_bpf_helper(need[i].type, need[i].helper, NULL);

		/* an error (not 0) is no answer: the load says more */
		if (r == 0) {
			snprintf(err, errlen,
				 "kernel %s lacks the BPF helper %s (Linux %s): kthrottle needs Linux 6.1 or later",
				 u.release, need[i].name, need[i].since);
			return -ENOTSUP;
		}
	}
	return 0;
}

/* The verifier's log, as libbpf printed it on the last failed load. */
static char vlog[16384];

void kt_features_vlog_reset(void)
{
	vlog[0] = 0;
}

void kt_features_vlog_feed(const char *text)
{
	const char *b = strstr(text, "-- BEGIN PROG LOAD LOG --"), *e;
	size_t n;

	if (!b)
		return;
	b += strlen("-- BEGIN PROG LOAD LOG --");
	b += *b == '\n';
	e = strstr(b, "-- END PROG LOAD LOG --");
	if (!e)
		e = b + strlen(b);
	/* the end says why: keep the last part of a long log */
	n = (size_t)(e - b);
	if (n >= sizeof(vlog)) {
		b = e - (sizeof(vlog) - 1);
		n = sizeof(vlog) - 1;
	}
	memcpy(vlog, b, n);
	vlog[n] = 0;
}

/* Lines of the log that say nothing of the cause: statistics, source
 * annotations, register states. */
static bool vlog_noise(const char *l, size_t n)
{
	static const char *const pfx[] = { "processed ", "verification time", "stack depth", "; ",
					   "mark_precise", "func#", "Validating", "old state",
					   "last_idx", "parent " };

	if (!n)
		return true;
	for (size_t i = 0; i < sizeof(pfx) / sizeof(pfx[0]); i++)
		if (n >= strlen(pfx[i]) && !strncmp(l, pfx[i], strlen(pfx[i])))
			return true;
	/* an instruction: "123: (85) call ..." */
	size_t d = 0;
	while (d < n && l[d] >= '0' && l[d] <= '9')
		d++;
	return d && d < n && l[d] == ':';
}

bool kt_features_vlog_line(char *line, size_t len, char *tail, size_t tail_len)
{
	const char *starts[KT_VLOG_TAIL];
	size_t lens[KT_VLOG_TAIL];
	int n = 0, total = 0;
	bool found = false;

	if (line && len)
		line[0] = 0;
	if (tail && tail_len)
		tail[0] = 0;
	if (!vlog[0])
		return false;
	for (const char *p = vlog; *p;) {
		size_t l = strcspn(p, "\n");

		if (l) {
			starts[total % KT_VLOG_TAIL] = p;
			lens[total % KT_VLOG_TAIL] = l;
			total++;
		}
		p += l + (p[l] == '\n');
	}
	n = total < KT_VLOG_TAIL ? total : KT_VLOG_TAIL;
	/* the cause is the last line that is not noise */
	for (int i = total - 1; i >= total - n && !found; i--) {
		const char *s = starts[i % KT_VLOG_TAIL];
		size_t l = lens[i % KT_VLOG_TAIL];

		if (vlog_noise(s, l))
			continue;
		if (line && len)
			snprintf(line, len, "%.*s", (int)l, s);
		found = true;
	}
	if (tail && tail_len) {
		size_t o = 0;

		for (int i = total - n; i < total && o + 1 < tail_len; i++) {
			int w = snprintf(tail + o, tail_len - o, "%.*s\n", (int)lens[i % KT_VLOG_TAIL],
					 starts[i % KT_VLOG_TAIL]);
			o += w > 0 ? (size_t)w : 0;
		}
	}
	return found;
}
