// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The store fixture of the Redis store's unit tests (kt_storefx.h). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kt_storefx.h"

struct rp_proc kfx_master;
struct rp_proc kfx_procs[KT_STOREFX_PROCS];
static struct kt_store *kept[KT_STOREFX_STORES];

int kt_storefx_group_setup(void **state)
{
	(void)state;
	return rp_start_master(&kfx_master, NULL);
}

int kt_storefx_group_teardown(void **state)
{
	(void)state;
	rp_stop(&kfx_master);
	return 0;
}

void kt_storefx_cfg_single(struct kt_store_cfg *c, int port, const char *prefix)
{
	memset(c, 0, sizeof(*c));
	c->kind = KT_STORE_REDIS;
	c->line = 7;
	c->redis_mode = KT_REDIS_SINGLE;
	c->host = "127.0.0.1";
	c->port = port;
	c->key_prefix = (char *)prefix;
}

bool kt_storefx_keep(struct kt_store *s)
{
	for (size_t i = 0; i < KT_STOREFX_STORES; i++) {
		if (!kept[i]) {
			kept[i] = s;
			return true;
		}
	}
	return false;
}

void kt_storefx_close_all(void)
{
	for (size_t i = 0; i < KT_STOREFX_STORES; i++) {
		kt_store_close(kept[i]);
		kept[i] = NULL;
	}
}

void kt_storefx_stop_all(struct rp_proc *procs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		rp_stop(&procs[i]);
}

int kt_storefx_teardown(void **state)
{
	(void)state;
	kt_storefx_close_all();
	kt_storefx_stop_all(kfx_procs, KT_STOREFX_PROCS);
	return 0;
}

void kt_storefx_do(const char *fmt, ...)
{
	redisContext *c = rp_connect(&kfx_master);
	redisReply *r = NULL;
	char e[256] = "";
	va_list ap;

	if (c) {
		va_start(ap, fmt);
		r = redisvCommand(c, fmt, ap);
		va_end(ap);
		redisFree(c);
	}
	if (!r)
		fail_msg("redis: %s: no reply", fmt);
	if (r->type == REDIS_REPLY_ERROR)
		snprintf(e, sizeof(e), "%s", r->str);
	freeReplyObject(r);
	if (e[0])
		fail_msg("redis: %s: %s", fmt, e);
}

int kt_storefx_flush_teardown(void **state)
{
	redisReply *r;

	(void)state;
	kt_storefx_close_all();
	if ((r = rp_command(&kfx_master, "FLUSHALL")))
		freeReplyObject(r);
	return 0;
}

int kt_storefx_spread_limits(const struct rp_proc *nodes, int nnodes, const char *prefix, int n,
			     char names[][32], int *slots)
{
	int owners[KT_STOREFX_SPREAD], found = 0;

	if (n > KT_STOREFX_SPREAD)
		n = KT_STOREFX_SPREAD;
	for (int k = 0; k < 1000 && found < n; k++) {
		char name[32], key[96];
		int slot, o, j;

		snprintf(name, sizeof(name), "lim%d", k);
		snprintf(key, sizeof(key), "%s:pool:{%s}:hb", prefix, name);
		slot = rp_cluster_slot(&nodes[0], key);
		o = slot >= 0 ? rp_cluster_slot_owner(nodes, nnodes, slot) : -1;
		for (j = 0; j < found && owners[j] != o; j++)
			;
		if (o < 0 || j < found)
			continue;
		owners[found] = o;
		slots[found] = slot;
		snprintf(names[found++], 32, "%s", name);
	}
	return found;
}
