// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* deploy/kubernetes/ against the Kubernetes API schemas, offline: the
 * shipped manifests pass tests/k8s/validate.mjs (strict: unknown fields are
 * errors), mutated copies fail with a line naming the file and the field,
 * and the DaemonSet keeps the settings the rolling update and the pins
 * depend on. Needs node and tests/k8s/node_modules (scripts/setup.sh);
 * without node the tests fail, they do not skip. */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include <json-c/json.h>

#include "ktest.h"

#define DS_NAME "DaemonSet/kthrottled"
#define DS_DOC "0 " DS_NAME /* its document index, then KIND/NAME */

static char root[PATH_MAX];
static char validator[PATH_MAX + 32];
static char tmpdir[] = "/tmp/kt-test-manifests-XXXXXX";

static bool is_file(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The source tree: $KT_SRCDIR, else the parent of the build dir (binaries
 * live in <build>/tests/unit/), else the working directory (make test runs
 * from the repo root). */
static int find_root(void)
{
	const char *cands[3] = { getenv("KT_SRCDIR"), NULL, "." };
	char parent[PATH_MAX], probe[PATH_MAX + 64];

	snprintf(parent, sizeof(parent), "%s/..", ktest_build_dir());
	cands[1] = parent;
	for (int i = 0; i < 3; i++) {
		if (!cands[i])
			continue;
		snprintf(probe, sizeof(probe), "%s/deploy/kubernetes/daemonset.yaml", cands[i]);
		if (is_file(probe) && realpath(cands[i], root))
			return 0;
	}
	return -1;
}

/* Runs argv (no shell) and returns its exit status, -1 if it could not run;
 * *out gets stdout and stderr together, malloc'd. */
static int run(char *const argv[], char **out)
{
	size_t len = 0, cap = 8192;
	char *buf = malloc(cap);
	int pfd[2], status;
	pid_t pid;
	ssize_t n;

	assert_non_null(buf);
	assert_int_equal(pipe2(pfd, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(pfd[1], 1);
		dup2(pfd[1], 2);
		execvp(argv[0], argv);
		fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(pfd[1]);
	while ((n = read(pfd[0], buf + len, cap - len - 1)) > 0 || (n < 0 && errno == EINTR)) {
		if (n < 0)
			continue;
		len += (size_t)n;
		if (cap - len < 1024) {
			cap *= 2;
			buf = realloc(buf, cap);
			assert_non_null(buf);
		}
	}
	close(pfd[0]);
	buf[len] = 0;
	*out = buf;
	while (waitpid(pid, &status, 0) < 0)
		assert_int_equal(errno, EINTR);
	if (!WIFEXITED(status))
		return -1;
	return WEXITSTATUS(status) == 127 && strstr(buf, "cannot run ") ? -1 : WEXITSTATUS(status);
}

static char *read_file(const char *path)
{
	FILE *f = fopen(path, "re");
	char *buf;
	long n;

	assert_non_null(f);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	assert_true(n > 0);
	rewind(f);
	buf = malloc((size_t)n + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = 0;
	fclose(f);
	return buf;
}

static int setup(void **state)
{
	char nm[PATH_MAX + 32], prefix[PATH_MAX + 32], *out = NULL;
	char *node_version[] = { "node", "--version", NULL };
	int rc;

	(void)state;
	if (find_root()) {
		fprintf(stderr, "test_manifests: deploy/kubernetes/ not found (set KT_SRCDIR to the source tree)\n");
		return -1;
	}
	rc = run(node_version, &out);
	if (rc != 0) {
		fprintf(stderr, "test_manifests: node is missing (%s): scripts/setup.sh installs nodejs and npm\n",
			rc < 0 ? "not on PATH" : out);
		free(out);
		return -1;
	}
	free(out);
	snprintf(validator, sizeof(validator), "%s/tests/k8s/validate.mjs", root);
	snprintf(prefix, sizeof(prefix), "%s/tests/k8s", root);
	snprintf(nm, sizeof(nm), "%s/node_modules", prefix);
	if (access(nm, F_OK) != 0) {
		/* normally done by scripts/setup.sh; the lock file pins every package */
		char *npm[] = { "npm", "ci", "--prefix", prefix, "--no-audit", "--no-fund", NULL };

		rc = run(npm, &out);
		if (rc != 0) {
			fprintf(stderr, "test_manifests: npm ci --prefix %s failed (%d):\n%s\n", prefix, rc, out);
			free(out);
			return -1;
		}
		free(out);
	}
	if (!mkdtemp(tmpdir)) {
		fprintf(stderr, "test_manifests: mkdtemp: %s\n", strerror(errno));
		return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	char pattern[sizeof(tmpdir) + 8];
	glob_t g;

	(void)state;
	snprintf(pattern, sizeof(pattern), "%s/*", tmpdir);
	if (glob(pattern, 0, NULL, &g) == 0) {
		for (size_t i = 0; i < g.gl_pathc; i++)
			unlink(g.gl_pathv[i]);
		globfree(&g);
	}
	rmdir(tmpdir);
	return 0;
}

/* node validate.mjs [extra...] FILE...; returns the exit status */
static int validate(const char *const *extra, int n_extra, char *const *files, size_t n_files,
		    char **out)
{
	char *argv[16 + 64];
	size_t n = 0;

	assert_true(n_files <= 64);
	argv[n++] = "node";
	argv[n++] = validator;
	for (int i = 0; i < n_extra; i++)
		argv[n++] = (char *)extra[i];
	for (size_t i = 0; i < n_files; i++)
		argv[n++] = files[i];
	argv[n] = NULL;
	return run(argv, out);
}

static void test_shipped_manifests_valid(void **state)
{
	char pattern[PATH_MAX + 32], *out;
	glob_t g;
	int rc;

	(void)state;
	snprintf(pattern, sizeof(pattern), "%s/deploy/kubernetes/*.yaml", root);
	assert_int_equal(glob(pattern, 0, NULL, &g), 0);
	/* namespace, rbac, configmap, daemonset, kustomization */
	assert_int_equal(g.gl_pathc, 5);
	rc = validate(NULL, 0, g.gl_pathv, g.gl_pathc, &out);
	if (rc != 0)
		fail_msg("validate.mjs exit %d:\n%s", rc, out);
	/* 3 in rbac.yaml, one in each other file */
	assert_non_null(strstr(out, "7 objects valid"));
	free(out);
	globfree(&g);
}

/* Writes deploy/kubernetes/<src> with `from` replaced by `to` (which must
 * occur) to the temp dir as <name>.yaml, validates it, and checks it fails
 * with the line "<file>: <doc> <path>: <problem...>", doc being "INDEX KIND/NAME". */
static void mutant_fails(const char *src, const char *from, const char *to, const char *name,
			 const char *doc, const char *path, const char *problem)
{
	char in[PATH_MAX + 64], file[sizeof(tmpdir) + 64], want[1024], *text, *at, *out, *mut;
	char *files[1] = { file };
	size_t lf = strlen(from), lt = strlen(to);
	int rc;

	snprintf(in, sizeof(in), "%s/deploy/kubernetes/%s", root, src);
	text = read_file(in);
	at = strstr(text, from);
	if (!at)
		fail_msg("%s no longer holds %s: update the mutation", src, from);
	mut = malloc(strlen(text) - lf + lt + 1);
	assert_non_null(mut);
	memcpy(mut, text, (size_t)(at - text));
	memcpy(mut + (at - text), to, lt);
	strcpy(mut + (at - text) + lt, at + lf);
	snprintf(file, sizeof(file), "%s/%s.yaml", tmpdir, name);
	assert_int_equal(ktest_write_file(file, mut), 0);

	rc = validate(NULL, 0, files, 1, &out);
	snprintf(want, sizeof(want), "%s: %s: %s: %s", file, doc, path, problem);
	if (rc != 1 || !strstr(out, want))
		fail_msg("%s: want exit 1 and a line starting \"%s\", got exit %d:\n%s", name, want, rc, out);
	free(out);
	free(mut);
	free(text);
}

static void test_unknown_field(void **state)
{
	(void)state;
	mutant_fails("daemonset.yaml", "      containers:\n", "      contaners:\n", "typo", DS_DOC,
		     "spec.template.spec.contaners", "unknown field");
	/* inside a list, and in a nested type (Container) */
	mutant_fails("daemonset.yaml", "imagePullPolicy:", "imagePulPolicy:", "typo-nested", DS_DOC,
		     "spec.template.spec.containers[0].imagePulPolicy", "unknown field");
}

static void test_wrong_type(void **state)
{
	(void)state;
	mutant_fails("daemonset.yaml", "terminationGracePeriodSeconds: 30",
		     "terminationGracePeriodSeconds: \"thirty\"", "type", DS_DOC,
		     "spec.template.spec.terminationGracePeriodSeconds", "must be integer");
}

static void test_missing_required(void **state)
{
	(void)state;
	mutant_fails("daemonset.yaml", "        - name: kthrottled\n          image:", "        - image:",
		     "noname", DS_DOC, "spec.template.spec.containers[0].name",
		     "required field missing");
}

static void test_bad_enum(void **state)
{
	(void)state;
	mutant_fails("daemonset.yaml", "mountPropagation: Bidirectional", "mountPropagation: Bidirectionl",
		     "enum", DS_DOC, "spec.template.spec.containers[0].volumeMounts[0].mountPropagation",
		     "must be one of");
}

static void test_bad_api_version_and_kind(void **state)
{
	(void)state;
	mutant_fails("daemonset.yaml", "apiVersion: apps/v1\n", "apiVersion: apps/v2\n", "apiversion",
		     DS_DOC, "apiVersion", "no Kubernetes API type");
	mutant_fails("daemonset.yaml", "kind: DaemonSet\n", "kind: DaemonSett\n", "kind",
		     "0 DaemonSett/kthrottled", "kind", "no Kubernetes API type");
	/* the second document of rbac.yaml: the line names it by index */
	mutant_fails("rbac.yaml", "\nkind: ClusterRole\n", "\nkind: ClusterRol\n", "rbac-kind",
		     "1 ClusterRol/kthrottle:kthrottled", "kind", "no Kubernetes API type");
}

static void test_embedded_config_is_yaml(void **state)
{
	(void)state;
	mutant_fails("configmap.yaml", "    limits:\n", "    limits: [\n", "cm", "0 ConfigMap/kthrottled-config",
		     "data.kthrottled.yaml", "embedded YAML: ");
}

/* --get KIND/NAME PATH over the shipped files: the value as JSON */
static void expect_field(const char *object, const char *path, const char *json)
{
	char pattern[PATH_MAX + 32], want[512], *out;
	const char *extra[3] = { "--get", object, path };
	glob_t g;
	int rc;

	snprintf(pattern, sizeof(pattern), "%s/deploy/kubernetes/*.yaml", root);
	assert_int_equal(glob(pattern, 0, NULL, &g), 0);
	rc = validate(extra, 3, g.gl_pathv, g.gl_pathc, &out);
	snprintf(want, sizeof(want), "%s\n", json);
	if (rc != 0 || strcmp(out, want))
		fail_msg("%s %s: want %s, got exit %d: %s", object, path, json, rc, out);
	free(out);
	globfree(&g);
}

/* The ConfigMap's kthrottled.yaml is a config the daemon accepts: written
 * out and given to `kthrottled --check` (the pods: selector and the
 * kubernetes: block parsed and validated, not only read as YAML). */
static void test_embedded_config_checks(void **state)
{
	char pattern[PATH_MAX + 32], file[sizeof(tmpdir) + 32], daemon[PATH_MAX + 32], *out;
	const char *extra[3] = { "--get", "ConfigMap/kthrottled-config", "data" };
	json_object *data, *cfg;
	glob_t g;
	FILE *f;

	(void)state;
	snprintf(pattern, sizeof(pattern), "%s/deploy/kubernetes/*.yaml", root);
	assert_int_equal(glob(pattern, 0, NULL, &g), 0);
	assert_int_equal(validate(extra, 3, g.gl_pathv, g.gl_pathc, &out), 0);
	globfree(&g);
	data = json_tokener_parse(out);
	free(out);
	assert_non_null(data);
	assert_true(json_object_object_get_ex(data, "kthrottled.yaml", &cfg));
	snprintf(file, sizeof(file), "%s/kthrottled.yaml", tmpdir);
	f = fopen(file, "w");
	assert_non_null(f);
	fputs(json_object_get_string(cfg), f);
	fclose(f);
	json_object_put(data);

	snprintf(daemon, sizeof(daemon), "%s/kthrottled", ktest_build_dir());
	{
		char *argv[] = { daemon, "--check", "--config", file, NULL };
		int rc = run(argv, &out);

		print_message("%s", out);
		assert_int_equal(rc, 0);
		assert_non_null(strstr(out, "ok, 1 limit(s)"));
		free(out);
	}
}

#define CTR "spec.template.spec.containers[name=kthrottled]."
#define PROBE_CMD(extra) "[\"/usr/bin/kthrottlectl\",\"--socket\",\"/run/kthrottle/kthrottled.sock\",\"health\"" extra "]"

static void test_daemonset_settings(void **state)
{
	(void)state;
	/* pins outlive the pod only if a bpffs the daemon mounts reaches the host */
	expect_field(DS_NAME, CTR "volumeMounts[mountPath=/sys/fs/bpf].mountPropagation",
		     "\"Bidirectional\"");
	expect_field(DS_NAME, "spec.template.spec.volumes[name=bpffs].hostPath",
		     "{\"path\":\"/sys/fs/bpf\",\"type\":\"DirectoryOrCreate\"}");
	/* Kubernetes refuses Bidirectional unless privileged */
	expect_field(DS_NAME, CTR "securityContext.privileged", "true");
	expect_field(DS_NAME, CTR "volumeMounts[mountPath=/sys/fs/cgroup].readOnly", "true");
	expect_field(DS_NAME, CTR "env[name=NODE_NAME].valueFrom.fieldRef.fieldPath", "\"spec.nodeName\"");
	/* both probes ask the daemon (health), never the pinned maps */
	expect_field(DS_NAME, CTR "readinessProbe.exec.command", PROBE_CMD(""));
	expect_field(DS_NAME, CTR "livenessProbe.exec.command", PROBE_CMD(",\"--live\""));
	/* the pin dir lock admits one daemon per node: a surge pod never runs */
	expect_field(DS_NAME, "spec.updateStrategy.type", "\"RollingUpdate\"");
	expect_field(DS_NAME, "spec.updateStrategy.rollingUpdate.maxSurge", "0");
	expect_field(DS_NAME, "spec.updateStrategy.rollingUpdate.maxUnavailable", "1");
	expect_field(DS_NAME, CTR "command",
		     "[\"/usr/sbin/kthrottled\",\"--config\",\"/etc/kthrottle/kthrottled.yaml\"]");
	expect_field(DS_NAME, "spec.template.spec.volumes[name=config].configMap.name",
		     "\"kthrottled-config\"");
	expect_field(DS_NAME, "spec.template.spec.serviceAccountName", "\"kthrottled\"");
	expect_field("ClusterRole/kthrottle:kthrottled", "rules",
		     "[{\"apiGroups\":[\"\"],\"resources\":[\"pods\"],\"verbs\":[\"get\",\"list\",\"watch\"]}]");
	expect_field("Kustomization/?", "resources",
		     "[\"namespace.yaml\",\"rbac.yaml\",\"configmap.yaml\",\"daemonset.yaml\"]");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_shipped_manifests_valid),
		cmocka_unit_test(test_unknown_field),
		cmocka_unit_test(test_wrong_type),
		cmocka_unit_test(test_missing_required),
		cmocka_unit_test(test_bad_enum),
		cmocka_unit_test(test_bad_api_version_and_kind),
		cmocka_unit_test(test_embedded_config_is_yaml),
		cmocka_unit_test(test_embedded_config_checks),
		cmocka_unit_test(test_daemonset_settings),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
