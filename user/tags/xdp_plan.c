// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Tag limits at XDP: which interfaces carry the program, each tag limit's
 * rules in the kernel's maps, and what a start or a reload changes there
 * (tags_int.h). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <net/if.h>

#include "kernel/bpf_loader.h" /* kt_bpf_cleanup_tags */
#include "base/log.h"
#include "tags/tags_int.h"

/* ---- XDP: the kernel side of source tags ---- */

uint32_t kt_tags_xdp_total(const struct kt_config *cfg)
{
	uint64_t sum = 0;

	for (int i = 0; i < cfg->n_tags; i++)
		if (cfg->tags[i].xdp)
			sum += cfg->tags[i].max_tags;
	return sum > KT_TAG_MAX_TAGS ? KT_TAG_MAX_TAGS : (uint32_t)sum;
}

/* Every xdp interface name to its index: the check a start or reload makes
 * before anything changes. */
int kt_tags_resolve_ifaces(struct kt_tags *t, char *err, size_t errlen)
{
	for (int i = 0; i < t->n; i++) {
		struct tlimit *l = &t->l[i];

		for (int k = 0; l->cfg.xdp && k < l->cfg.n_ifaces; k++) {
			l->ifindex[k] = (int)if_nametoindex(l->cfg.ifaces[k]);
			if (!l->ifindex[k]) {
				snprintf(err, errlen, "tag limit %s (line %d): xdp.interfaces: no interface %s on this node",
					 l->cfg.name, l->cfg.line, l->cfg.ifaces[k]);
				return -ENODEV;
			}
		}
	}
	return 0;
}

int kt_tags_check(const struct kt_config *cfg, char *err, size_t errlen)
{
	for (int i = 0; i < cfg->n_tags; i++) {
		const struct kt_tag_limit_cfg *c = &cfg->tags[i];

		for (int k = 0; c->xdp && k < c->n_ifaces; k++) {
			if (!if_nametoindex(c->ifaces[k])) {
				snprintf(err, errlen, "tag limit %s (line %d): xdp.interfaces: no interface %s on this node",
					 c->name, c->line, c->ifaces[k]);
				return -ENODEV;
			}
		}
	}
	return 0;
}

static int rule_addr(const struct kt_tag_prefix *p, uint8_t *fam, const uint8_t **addr)
{
	*fam = p->family;
	*addr = p->addr;
	return p->prefix_len;
}

/* Tag limit l's policy, rules, interfaces. */
static int xdp_program(struct kt_tags *t, struct tlimit *l, char *err, size_t errlen)
{
	const struct kt_tag_limit_cfg *c = &l->cfg;
	const uint8_t *addr;
	uint8_t fam;
	int ret, k, len;

	ret = kt_xdp_tags_set_limit(t->xdp, l->xid, c->rate, c->burst);
	for (k = 0; !ret && k < c->n_allow; k++) {
		len = rule_addr(&c->allow[k], &fam, &addr);
		ret = kt_xdp_tags_set_rule(t->xdp, l->xid, fam, addr, (uint8_t)len, 1, 0, 0);
	}
	for (k = 0; !ret && k < c->n_overrides; k++) {
		len = rule_addr(&c->overrides[k].prefix, &fam, &addr);
		ret = kt_xdp_tags_set_rule(t->xdp, l->xid, fam, addr, (uint8_t)len, 0, c->overrides[k].rate,
					   c->overrides[k].burst);
	}
	for (k = 0; !ret && k < c->n_ifaces; k++) {
		ret = kt_xdp_tags_set_iface(t->xdp, l->ifindex[k], l->xid, c->prefix_v4, c->prefix_v6);
		if (!ret)
			ret = kt_xdp_tags_attach(t->xdp, l->ifindex[k]);
	}
	if (ret)
		snprintf(err, errlen, "tag limit %s (line %d): xdp: %s", c->name, c->line, strerror(-ret));
	else
		l->st.ifaces = c->n_ifaces;
	return ret;
}

static bool has_iface(const struct tlimit *l, int ifindex)
{
	for (int k = 0; l->cfg.xdp && k < l->cfg.n_ifaces; k++)
		if (l->ifindex[k] == ifindex)
			return true;
	return false;
}

/* Undoes xdp_program for what `keep` (NULL: nothing) does not program
 * again: interfaces detached, rules removed, the limit out of use. */
static void xdp_unprogram(struct kt_tags *t, const struct tlimit *l, const struct tlimit *keep)
{
	const struct kt_tag_limit_cfg *c = &l->cfg;
	const uint8_t *addr;
	uint8_t fam;
	int k, len;

	for (k = 0; k < c->n_allow; k++) {
		len = rule_addr(&c->allow[k], &fam, &addr);
		kt_xdp_tags_del_rule(t->xdp, l->xid, fam, addr, (uint8_t)len);
	}
	for (k = 0; k < c->n_overrides; k++) {
		len = rule_addr(&c->overrides[k].prefix, &fam, &addr);
		kt_xdp_tags_del_rule(t->xdp, l->xid, fam, addr, (uint8_t)len);
	}
	for (k = 0; k < c->n_ifaces; k++) {
		if (keep && has_iface(keep, l->ifindex[k]))
			continue;
		kt_xdp_tags_del_iface(t->xdp, l->ifindex[k]);
		kt_xdp_tags_detach(t->xdp, l->ifindex[k]);
	}
	if (!keep || !keep->cfg.xdp)
		kt_xdp_tags_clear_limit(t->xdp, l->xid);
}

/* Interfaces a previous daemon attached that no tag limit has now:
 * detached, so no program outlives its configuration. */
static void detach_strays(struct kt_tags *t)
{
	DIR *d = opendir(t->xdp_pin);
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d))) {
		int ifindex, k;
		bool used = false;

		if (sscanf(de->d_name, "kt_xdp_link_%d", &ifindex) != 1)
			continue;
		for (k = 0; k < t->n && !used; k++)
			used = has_iface(&t->l[k], ifindex);
		if (!used) {
			kt_info("tags: detaching XDP from interface %d: no tag limit has it now", ifindex);
			kt_xdp_tags_del_iface(t->xdp, ifindex);
			kt_xdp_tags_detach(t->xdp, ifindex);
		}
	}
	closedir(d);
}

int kt_tags_xdp_open(struct kt_tags *t, const struct kt_config *cfg, char *err, size_t errlen)
{
	int ret;

	t->xdp_max_tags = kt_tags_xdp_total(cfg);
	ret = kt_xdp_tags_open(t->xdp_pin, t->xdp_max_tags, &t->xdp);
	if (ret == -EINVAL) {
		/* pinned by a daemon with another total maxTags: the buckets
		 * start over (the others' debts on this node are forgotten) */
		char path[PATH_MAX + 32];

		kt_warn("tags: the pinned XDP buckets have another size than maxTags now (%u): starting them over",
			t->xdp_max_tags);
		snprintf(path, sizeof(path), "%s/kt_tag_buckets", t->xdp_pin);
		unlink(path);
		ret = kt_xdp_tags_open(t->xdp_pin, t->xdp_max_tags, &t->xdp);
	}
	if (ret)
		snprintf(err, errlen, "tags: cannot load the XDP program (pins in %s): %s", t->xdp_pin,
			 strerror(-ret));
	return ret;
}


/* A start: the XDP program where tag limits want it, nothing where none
 * does (a previous daemon's attachments included). On error nothing stays
 * attached that this start attached. */
int kt_tags_xdp_start(struct kt_tags *t, const struct kt_config *cfg, char *err, size_t errlen)
{
	int ret, i;

	if (!kt_tags_xdp_total(cfg)) {
		ret = kt_bpf_cleanup_tags(cfg->pin_dir);
		if (ret)
			kt_warn("tags: cannot remove %s: %s", t->xdp_pin, strerror(-ret));
		return 0;
	}
	if ((ret = kt_tags_resolve_ifaces(t, err, errlen)) || (ret = kt_tags_xdp_open(t, cfg, err, errlen)))
		return ret;
	for (i = 0; i < t->n; i++) {
		if (!t->l[i].cfg.xdp)
			continue;
		if ((ret = xdp_program(t, &t->l[i], err, errlen))) {
			for (; i >= 0; i--)
				if (t->l[i].cfg.xdp)
					xdp_unprogram(t, &t->l[i], NULL);
			return ret;
		}
	}
	detach_strays(t);
	/* buckets a previous daemon left follow this configuration */
	kt_xdp_tags_set_buckets(t->xdp, UINT32_MAX);
	return 0;
}

/* A reload's commit for XDP: the old handle carries over, what the new
 * configuration drops is undone, the rest programmed again, and existing
 * buckets take their new policy in place. Failures here are reported, not
 * rolled back: the checks that can fail (interfaces, loading) ran first. */
void kt_tags_xdp_reload(struct kt_tags *t, struct kt_tags *old, const struct kt_config *cfg)
{
	char e[KT_ERR_LEN];

	if (old && old->xdp) {
		if (!t->xdp) {
			t->xdp = old->xdp;
			t->xdp_max_tags = old->xdp_max_tags;
		} else {
			kt_xdp_tags_close(t->xdp); /* both: keep the one in use */
			t->xdp = old->xdp;
			t->xdp_max_tags = old->xdp_max_tags;
		}
		old->xdp = NULL;
		for (int k = 0; k < old->n; k++) {
			const struct tlimit *ol = &old->l[k];
			const struct tlimit *keep = NULL;

			if (!ol->cfg.xdp)
				continue;
			for (int i = 0; i < t->n && !keep; i++)
				if (t->l[i].xid == ol->xid)
					keep = &t->l[i];
			xdp_unprogram(t, ol, keep);
		}
	}
	if (!kt_tags_xdp_total(cfg)) {
		kt_xdp_tags_close(t->xdp);
		t->xdp = NULL;
		kt_bpf_cleanup_tags(cfg->pin_dir);
		return;
	}
	if (kt_tags_xdp_total(cfg) != t->xdp_max_tags)
		kt_warn("tags: the XDP tag limits' maxTags now sum to %u; the kernel keeps %u buckets until kthrottled restarts",
			kt_tags_xdp_total(cfg), t->xdp_max_tags);
	for (int i = 0; i < t->n; i++) {
		if (t->l[i].cfg.xdp && xdp_program(t, &t->l[i], e, sizeof(e))) {
			kt_warn("reload: %s", e);
			snprintf(t->l[i].st.last_error, sizeof(t->l[i].st.last_error), "%s", e);
		}
	}
	kt_xdp_tags_set_buckets(t->xdp, UINT32_MAX);
}
