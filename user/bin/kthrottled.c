/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* kthrottled: the kthrottle node daemon. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernel/bpf_loader.h"
#include "base/cgroup.h"
#include "base/config.h"
#include "control/daemon.h"
#include "members/groups.h"
#include "members/resolve.h"
#include "tags/tags.h"
#include "base/log.h"

#define KT_VERSION "0.1.0"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: kthrottled --config FILE [options]\n"
		"       kthrottled --cleanup [--force] [--config FILE | --pin-dir DIR]\n"
		"\n"
		"Enforces the limits in FILE with BPF programs attached once per hook at the\n"
		"deepest common ancestor of the cgroups the limits select (attachRoot: auto,\n"
		"the default; on each member cgroup when that ancestor is the cgroup v2 root,\n"
		"or with attachRoot: members; at a given cgroup with attachRoot: PATH),\n"
		"and keeps their rates up to date (ramp-up, pool share). Programs and maps are\n"
		"pinned, so enforcement continues when the daemon exits or crashes, and a new\n"
		"daemon adopts them without a gap.\n"
		"\n"
		"Options:\n"
		"  -c, --config FILE     YAML configuration (see examples/full.yaml)\n"
		"      --check           run every check a start (and a reload) runs on FILE,\n"
		"                        short of loading and attaching BPF: syntax, cgroup\n"
		"                        paths and ids, store settings (no connection), and\n"
		"                        the kernel tables' limits (limits per cgroup and per\n"
		"                        destination, buckets, member cgroups); a file it\n"
		"                        accepts starts. Needs no root or BPF, only read\n"
		"                        access to FILE (and password files) and search\n"
		"                        access to the cgroup paths. Exit 0 ok, 2 with the\n"
		"                        error start would print\n"
		"      --cleanup         detach every program and remove every pin, then exit;\n"
		"                        refused for a directory that is not kthrottle's (on\n"
		"                        bpffs, owned by root, holding its maps) and while a\n"
		"                        kthrottled runs on it\n"
		"      --force           --cleanup even while a kthrottled runs on the pin dir\n"
		"      --pin-dir DIR     pin directory for --cleanup without --config\n"
		"                        (default " KT_DEFAULT_PIN_DIR ")\n"
		"      --detach-on-exit  on SIGTERM/SIGINT also detach and unpin (default: keep\n"
		"                        enforcing after exit)\n"
		"  -v, --verbose         debug logging, including libbpf's messages\n"
		"  -h, --help            this text\n"
		"      --version         print the version\n"
		"\n"
		"Signals: SIGHUP reloads FILE (an invalid file is rejected and the running\n"
		"configuration kept); SIGTERM/SIGINT stop. On stop, programs keep enforcing:\n"
		"members of limits shared through Redis stay in the pool and their kernel\n"
		"buckets run out the lease of the last store answer, then the onStoreFailure\n"
		"rate for fallbackFor, then close, unless a new kthrottled renews the lease\n"
		"first (a rolling restart changes nothing). Other limits keep their rates.\n"
		"Environment: NODE_NAME names the node when the config has no node: (and\n"
		"the Kubernetes node whose pods a pods: selector picks, without\n"
		"kubernetes.nodeName); KUBERNETES_SERVICE_HOST/_PORT give the API server\n"
		"without kubernetes.apiServer (both set in a pod of the DaemonSet).\n"
		"Exit status: 0 ok, 1 runtime error, 2 configuration or usage error.\n");
}

int main(int argc, char **argv)
{
	enum { OPT_CHECK = 256, OPT_CLEANUP, OPT_FORCE, OPT_PIN_DIR, OPT_DETACH, OPT_VERSION };
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "check", no_argument, NULL, OPT_CHECK },
		{ "cleanup", no_argument, NULL, OPT_CLEANUP },
		{ "force", no_argument, NULL, OPT_FORCE },
		{ "pin-dir", required_argument, NULL, OPT_PIN_DIR },
		{ "detach-on-exit", no_argument, NULL, OPT_DETACH },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, OPT_VERSION },
		{ 0 },
	};
	const char *config = NULL, *pin_dir = NULL;
	bool check = false, cleanup = false, force = false, detach = false;
	enum kt_log_level level = KT_LOG_INFO;
	char err[KT_ERR_LEN];
	struct kt_daemon *d;
	int c, ret;

	opterr = 0; /* one-line errors below instead of getopt's message and the usage */
	while ((c = getopt_long(argc, argv, ":c:vh", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			config = optarg;
			break;
		case OPT_CHECK:
			check = true;
			break;
		case OPT_CLEANUP:
			cleanup = true;
			break;
		case OPT_FORCE:
			force = true;
			break;
		case OPT_PIN_DIR:
			pin_dir = optarg;
			break;
		case OPT_DETACH:
			detach = true;
			break;
		case 'v':
			level = KT_LOG_DEBUG;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case OPT_VERSION:
			printf("kthrottled %s\n", KT_VERSION);
			return 0;
		case ':':
			fprintf(stderr, "kthrottled: error: option '%s' needs a value (see --help)\n",
				argv[optind - 1]);
			return KT_EXIT_CONFIG;
		default:
			fprintf(stderr, "kthrottled: error: unknown option '%s' (see --help)\n",
				argv[optind - 1]);
			return KT_EXIT_CONFIG;
		}
	}
	kt_log_init("kthrottled", level);
	kt_log_setup_libbpf();
	if (optind < argc) {
		kt_err("unexpected argument '%s' (see --help)", argv[optind]);
		return KT_EXIT_CONFIG;
	}

	if (cleanup) {
		struct kt_config cfg;
		if (config) {
			if (kt_config_load(config, &cfg, err, sizeof(err))) {
				kt_err("%s", err);
				return KT_EXIT_CONFIG;
			}
			ret = kt_bpf_cleanup_opts(cfg.pin_dir, force, err, sizeof(err));
			if (!ret)
				kt_info("removed every link and pin under %s", cfg.pin_dir);
			kt_config_free(&cfg);
		} else {
			const char *dir = pin_dir ? pin_dir : KT_DEFAULT_PIN_DIR;
			ret = kt_bpf_cleanup_opts(dir, force, err, sizeof(err));
			if (!ret)
				kt_info("removed every link and pin under %s", dir);
		}
		if (ret) {
			kt_err("%s", err);
			return KT_EXIT_RUNTIME;
		}
		return KT_EXIT_OK;
	}
	if (force) {
		kt_err("--force goes with --cleanup (see --help)");
		return KT_EXIT_CONFIG;
	}
	if (!config) {
		kt_err("--config FILE is required (see --help)");
		return KT_EXIT_CONFIG;
	}
	if (check) {
		/* kt_daemon_start's checks in its order, without the kernel */
		struct kt_config src, cfg = { 0 };
		struct kt_groups *groups = NULL;
		struct kt_plan plan;
		struct kt_pool *pool = NULL;
		char mount[4096];
		if (kt_config_load(config, &src, err, sizeof(err))) {
			kt_err("%s", err);
			return KT_EXIT_CONFIG;
		}
		ret = kt_cgroup2_mount(mount, sizeof(mount), NULL);
		/* the groups of groupBy limits the cgroups here have (no pods:
		 * the check asks no API server) */
		if (!ret && (kt_groups_new(&groups) ||
			     kt_groups_observe(groups, &src, mount, NULL, kt_clock_ns()) < 0 ||
			     kt_groups_expand(groups, &src, &cfg))) {
			kt_groups_free(groups);
			kt_config_free(&src);
			kt_err("out of memory");
			return KT_EXIT_RUNTIME;
		}
		kt_groups_free(groups);
		if (!ret)
			ret = kt_plan_resolve(&cfg, mount, NULL, &plan, err, sizeof(err));
		else
			snprintf(err, sizeof(err), "no cgroup v2 mount found in /proc/mounts");
		if (ret) {
			kt_err("%s", err);
			kt_config_free(&cfg);
			kt_config_free(&src);
			return ret == -ENOMEM ? KT_EXIT_RUNTIME : KT_EXIT_CONFIG;
		}
		/* validates the store settings; connects to nothing */
		ret = kt_pool_create(&pool, &cfg, err, sizeof(err));
		kt_pool_destroy(pool);
		if (!ret)
			ret = kt_plan_check(&plan, err, sizeof(err));
		if (!ret)
			ret = kt_tags_check(&cfg, err, sizeof(err));
		if (ret) {
			kt_err("%s", err);
			kt_plan_free(&plan);
			kt_config_free(&cfg);
			kt_config_free(&src);
			return ret == -ENOMEM ? KT_EXIT_RUNTIME : KT_EXIT_CONFIG;
		}
		printf("%s: ok, %d limit(s), %d tag limit(s)\n", config, src.n_limits, src.n_tags);
		kt_plan_free(&plan);
		kt_config_free(&cfg);
		kt_config_free(&src);
		return KT_EXIT_OK;
	}

	d = calloc(1, sizeof(*d));
	if (!d) {
		kt_err("out of memory");
		return KT_EXIT_RUNTIME;
	}
	ret = kt_daemon_start(d, config, detach);
	if (ret == KT_EXIT_OK) {
		ret = kt_daemon_run(d);
		kt_daemon_stop(d);
	}
	free(d);
	return ret;
}
