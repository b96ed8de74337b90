// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The Python module (python/kthrottle) end to end, as docs/clients.md
 * describes it: kthrottled publishes one cooperative limit of 20/s (min = max: no
 * ramp) with burst 5; the module is pip-installed offline into a fresh
 * venv of Debian's /usr/bin/python3 (the command in docs/clients.md); one script
 * then checks:
 *
 *  - 4 worker processes calling a @throttle(limit) function every ~1 ms
 *    for the same 5 s run it 100 ± 5 times plus the burst in total, and
 *    the other calls return None;
 *  - should_throttle takes the burst after a refill, then refuses;
 *  - max_delay=0.5 on the emptied limit waits about one interval (50 ms)
 *    and runs the function;
 *  - Limit.is_throttled/try_acquire see the empty bucket;
 *  - an unknown limit raises kthrottle.Error naming it, a bad config key
 *    TypeError, a bad value ValueError;
 *  - in-flight slots (an in-flight limit of 5, UDP to a reserved address,
 *    on a cgroup the script joins): 4 processes of 2 threads calling a
 *    @throttle(limit, concurrency=1, max_delay=2) function that sleeps
 *    5-25 ms, each recording when it ran: never more than 5 at once, and
 *    every call ran; a process holding 3 slots (kthrottle.slot) killed
 *    with -9: 5 slots can be had again within 1 s.
 *
 * The daemon runs on a bpffs this test mounts in a private mount namespace,
 * as in test_coop. */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "kt_daemonfx.h"
#include "ktest.h"
#include "kthrottle_client.h"

#define PYTHON "/usr/bin/python3"
/* Debian's wheels of pip, setuptools and wheel (python3-*-whl) */
#define WHEELS "/usr/share/python-wheels"
#define RATE 20.0
#define BURST 5
#define SECS 5.0
#define NPROC 4

static struct fixture {
	struct ktest_daemon d;
	char tmp[PATH_MAX];
	char cg[PATH_MAX]; /* the in-flight limit's member */
	bool started;
} fx;

#define SLOTS 5

/* The in-flight script: argv limit cgroup slots; prints "RESULT {json}". */
static const char slots_script[] =
	"import json, multiprocessing, os, random, signal, sys, threading, time\n"
	"import kthrottle\n"
	"LIMIT, CG, SLOTS = sys.argv[1], sys.argv[2], int(sys.argv[3])\n"
	"with open(CG + '/cgroup.procs', 'w') as f:\n"
	"    f.write(str(os.getpid()))\n"
	"def work(q):\n"
	"    spans, lock = [], threading.Lock()\n"
	"    @kthrottle.throttle(LIMIT, concurrency=1, max_delay=2)\n"
	"    def hold():\n"
	"        t0 = time.monotonic()\n"
	"        time.sleep(random.uniform(0.005, 0.025))\n"
	"        with lock:\n"
	"            spans.append((t0, time.monotonic()))\n"
	"        return True\n"
	"    def loop():\n"
	"        for _ in range(15):\n"
	"            hold()\n"
	"    ts = [threading.Thread(target=loop) for _ in range(2)]\n"
	"    [t.start() for t in ts]\n"
	"    [t.join() for t in ts]\n"
	"    q.put(spans)\n"
	"q = multiprocessing.Queue()\n"
	"ps = [multiprocessing.Process(target=work, args=(q,)) for _ in range(4)]\n"
	"[p.start() for p in ps]\n"
	"spans = [s for _ in ps for s in q.get()]\n"
	"[p.join() for p in ps]\n"
	"ev = sorted([(a, 1) for a, b in spans] + [(b, -1) for a, b in spans], key=lambda e: (e[0], e[1]))\n"
	"held = most = 0\n"
	"for _, d in ev:\n"
	"    held += d\n"
	"    most = max(most, held)\n"
	"out = {'calls': len(spans), 'most': most}\n"
	"# a holder of 3 killed with -9: its slots come back\n"
	"r, w = os.pipe()\n"
	"pid = os.fork()\n"
	"if pid == 0:\n"
	"    held = [kthrottle.slot(LIMIT) for _ in range(3)]\n"
	"    [s.acquire() for s in held]\n"
	"    os.write(w, b'x')\n"
	"    time.sleep(60)\n"
	"    os._exit(0)\n"
	"os.read(r, 1)\n"
	"try:\n"
	"    with kthrottle.slot(LIMIT) as a, kthrottle.slot(LIMIT) as b, kthrottle.slot(LIMIT) as c:\n"
	"        pass\n"
	"    out['third_free'] = 1\n"
	"except kthrottle.RateLimited as e:\n"
	"    out['third_free'] = 0\n"
	"    out['reason'] = e.reason\n"
	"os.kill(pid, signal.SIGKILL)\n"
	"os.waitpid(pid, 0)\n"
	"got = [kthrottle.slot(LIMIT, timeout=1) for _ in range(SLOTS)]\n"
	"[s.acquire() for s in got]\n"
	"out['after_kill'] = len(got)\n"
	"[s.release() for s in got]\n"
	"print('RESULT ' + json.dumps(out, separators=(',', ':')), flush=True)\n";

/* The script: argv limit rate burst secs nproc; prints one line
 * "RESULT {json}" (compact: ktest_json_num wants "key":value). */
static const char script[] =
	"import json, multiprocessing, sys, time\n"
	"import kthrottle\n"
	"from kthrottle import throttle, should_throttle\n"
	"LIMIT, RATE, BURST = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])\n"
	"SECS, NPROC = float(sys.argv[4]), int(sys.argv[5])\n"
	"out = {}\n"
	"# wrong uses, none of which charges LIMIT\n"
	"try:\n"
	"    throttle(LIMIT, bogus=1)\n"
	"except TypeError as e:\n"
	"    out['badkey'] = str(e)\n"
	"try:\n"
	"    should_throttle(LIMIT, max_delay=-1)\n"
	"except ValueError as e:\n"
	"    out['badvalue'] = str(e)\n"
	"# each rejected input raises what the stdlib would, charging nothing\n"
	"import math, socket\n"
	"def kind(f):\n"
	"    try:\n"
	"        f()\n"
	"        return 'ok'\n"
	"    except Exception as e:\n"
	"        return type(e).__name__\n"
	"bad = {\n"
	"    'cost_over_burst': lambda: should_throttle(LIMIT, cost=BURST + 1),\n"
	"    'cost_bool': lambda: should_throttle(LIMIT, cost=True),\n"
	"    'cost_float': lambda: should_throttle(LIMIT, cost=2.0),\n"
	"    'cost_zero': lambda: should_throttle(LIMIT, cost=0),\n"
	"    'cost_neg': lambda: should_throttle(LIMIT, cost=-1),\n"
	"    'delay_nan': lambda: should_throttle(LIMIT, max_delay=math.nan),\n"
	"    'delay_inf': lambda: should_throttle(LIMIT, max_delay=math.inf),\n"
	"    'delay_bool': lambda: should_throttle(LIMIT, max_delay=True),\n"
	"    'name_long': lambda: should_throttle('a' * 32),\n"
	"    'name_nul': lambda: should_throttle('a\\0b'),\n"
	"    'name_int': lambda: should_throttle(5),\n"
	"    'try_over_burst': lambda: kthrottle.Limit(LIMIT).try_acquire(BURST + 1),\n"
	"    'acq_timeout_neg': lambda: kthrottle.Limit(LIMIT).acquire(1, -1),\n"
	"    'acq_timeout_nan': lambda: kthrottle.Limit(LIMIT).acquire(1, math.nan),\n"
	"    'tq_timeout_bool': lambda: kthrottle.TagQuery(timeout_ms=True),\n"
	"    'tq_timeout_big': lambda: kthrottle.TagQuery(timeout_ms=10001),\n"
	"}\n"
	"out['bad'] = {k: kind(f) for k, f in bad.items()}\n"
	"# connect: socket.connect's exceptions for the same addresses, no wrap\n"
	"free = socket.socket()\n"
	"free.bind(('127.0.0.1', 0))\n"
	"port = free.getsockname()[1]\n"
	"free.close()  # nothing listens there now\n"
	"addrs = [(socket.AF_INET, ('127.0.0.1', port + 65536)), (socket.AF_INET, ('127.0.0.1', -1)),\n"
	"         (socket.AF_INET, ('127.0.0.1', 2**40)), (socket.AF_INET, ('127.0.0.1', 1.5)),\n"
	"         (socket.AF_INET, ('127.0.0.1', '80')), (socket.AF_INET, ('127.0.0.1',)),\n"
	"         (socket.AF_INET, ['127.0.0.1', port]), (socket.AF_INET, (None, port)),\n"
	"         (socket.AF_INET, ('no-such-host.invalid', port)), (socket.AF_INET, ('a\\0', port)),\n"
	"         (socket.AF_INET6, ('::1', 97535)), (socket.AF_INET6, ('::1', port, 2**20)),\n"
	"         (socket.AF_INET6, ('::1', port, 0, 0, 0)), (socket.AF_INET, ('127.0.0.1', port)),\n"
	"         (socket.AF_INET6, ('::1', port))]\n"
	"conn = []\n"
	"for fam, a in addrs:\n"
	"    with socket.socket(fam) as s1, socket.socket(fam) as s2:\n"
	"        conn.append([kind(lambda: s1.connect(a)), kind(lambda: kthrottle.connect(s2, a))])\n"
	"out['conn'] = conn\n"
	"out['conn_scope'] = kind(lambda: kthrottle.connect(socket.socket(socket.AF_INET6), ('::1', port, 0, 2**32)))\n"
	"try:\n"
	"    should_throttle('no-such-limit')\n"
	"except kthrottle.Error as e:\n"
	"    out['unknown'], out['unknown_errno'] = str(e), e.errno\n"
	"\n"
	"@throttle(LIMIT)\n"
	"def work():\n"
	"    return 1\n"
	"\n"
	"def worker(start, q):\n"
	"    ran = none = 0\n"
	"    while time.monotonic() < start:\n"
	"        time.sleep(0.001)\n"
	"    while time.monotonic() < start + SECS:\n"
	"        if work() is None:\n"
	"            none += 1\n"
	"        else:\n"
	"            ran += 1\n"
	"        time.sleep(0.001)  # a caller, not a spinner\n"
	"    q.put((ran, none))\n"
	"\n"
	"# fork: the children inherit the module, each opens its own handle\n"
	"ctx = multiprocessing.get_context('fork')\n"
	"q = ctx.Queue()\n"
	"start = time.monotonic() + 0.5  # one window for all (CLOCK_MONOTONIC)\n"
	"ps = [ctx.Process(target=worker, args=(start, q)) for _ in range(NPROC)]\n"
	"for p in ps:\n"
	"    p.start()\n"
	"res = [q.get(timeout=SECS + 30) for _ in ps]\n"
	"for p in ps:\n"
	"    p.join()\n"
	"out['exitcodes'] = sum(abs(p.exitcode) for p in ps)\n"
	"out['ran'] = sum(r for r, _ in res)\n"
	"out['none'] = sum(n for _, n in res)\n"
	"\n"
	"# refilled after burst intervals: should_throttle takes the burst\n"
	"time.sleep(BURST / RATE + 0.2)\n"
	"drained = 0\n"
	"while drained < 1000 and not should_throttle(LIMIT):\n"
	"    drained += 1\n"
	"out['drained'] = drained\n"
	"\n"
	"# refused a moment ago: the next token is about one interval away\n"
	"@throttle(LIMIT, max_delay=0.5)\n"
	"def patient():\n"
	"    return 'ran'\n"
	"t = time.monotonic()\n"
	"out['delay_ran'] = int(patient() == 'ran')\n"
	"out['delay_waited'] = time.monotonic() - t\n"
	"out['wraps'] = patient.__name__\n"
	"\n"
	"with kthrottle.Limit(LIMIT) as lim:\n"
	"    thr, out['thr_s'] = lim.is_throttled()\n"
	"    ok, out['retry_s'] = lim.try_acquire()\n"
	"    out['thr'], out['try_ok'] = int(thr), int(ok)\n"
	"print('RESULT ' + json.dumps(out, separators=(',', ':')), flush=True)\n";

static int teardown(void **state)
{
	(void)state;
	if (fx.started)
		ktest_daemon_cleanup(&fx.d);
	fx.started = false;
	if (fx.tmp[0])
		ktest_rmtree(fx.tmp);
	fx.tmp[0] = 0;
	if (fx.cg[0])
		ktest_cgroup_destroy(fx.cg);
	fx.cg[0] = 0;
	return 0;
}

static void start_daemon(void)
{
	char body[1024];

	assert_int_equal(kt_daemonfx_bpffs_init(&fx.d), 0);
	assert_int_equal(ktest_cgroup_create("pyslots", fx.cg, sizeof(fx.cg)), 0);
	/* min = max: the rate is 20/s from the first tick, no ramp */
	snprintf(body, sizeof(body),
		 "tickInterval: 100ms\n"
		 "limits:\n"
		 "  - name: api\n"
		 "    unit: request\n"
		 "    burst: %d\n"
		 "    rateLimit: {min: %g, max: %g}\n"
		 "  - name: llm\n"
		 "    cgroups: [%s]\n"
		 "    unit: concurrent\n"
		 "    match: {cidrs: [127.255.0.2/32], ports: 7, protocol: udp}\n"
		 "    rateLimit: {max: %d}\n",
		 BURST, RATE, RATE, fx.cg, SLOTS);
	assert_int_equal(ktest_daemon_config(&fx.d, body), 0);
	fx.started = true;
	assert_int_equal(ktest_daemon_start_logged(&fx.d), 0);
	setenv(KTHROTTLE_PIN_DIR_ENV, fx.d.pin_dir, 1);
}

/* Runs argv; its exit status, and its output printed if it failed (or
 * always with `show`) and kept in *out (malloc'd) if out is not NULL. */
static int run(char *const argv[], bool show, char **out)
{
	char *o = NULL;
	int rc = ktest_run_capture(argv, &o);

	if (rc || show)
		print_message("$ %s ... -> %d\n%s", argv[0], rc, o ? o : "");
	if (!out) {
		free(o);
		return rc;
	}
	*out = o ? o : strdup("");
	return rc;
}

static double num(const char *json, const char *key)
{
	double v = -1;

	if (!ktest_json_num(json, key, &v))
		print_message("no \"%s\" in the result\n", key);
	assert_true(ktest_json_num(json, key, &v));
	return v;
}

static void test_python_decorator(void **state)
{
	char venv[PATH_MAX], pkg[PATH_MAX], py[PATH_MAX], pip[PATH_MAX], path[PATH_MAX],
		lib[PATH_MAX], repo[PATH_MAX];
	char rate_s[16], burst_s[16], secs_s[16], nproc_s[16];
	char *out = NULL, *res;
	double ran, none, drained, waited, interval = 1.0 / RATE;

	(void)state;
	KTEST_SKIP_IF(kt_bpffs.skip_why);
	/* scripts/setup.sh installs these: missing is a failure, not a skip */
	assert_int_equal(access(PYTHON, X_OK), 0);
	assert_int_equal(access(WHEELS, R_OK), 0);

	start_daemon();
	assert_int_equal(ktest_tmpdir(fx.tmp, sizeof(fx.tmp)), 0);
	snprintf(repo, sizeof(repo), "%s/..", ktest_build_dir());
	snprintf(lib, sizeof(lib), "%s/libkthrottle.so.0", ktest_build_dir());
	assert_int_equal(access(lib, R_OK), 0);
	/* a copy: pip builds in the source tree */
	snprintf(path, sizeof(path), "%s/python", repo);
	snprintf(pkg, sizeof(pkg), "%s/python", fx.tmp);
	assert_int_equal(run((char *[]){ "/bin/cp", "-r", path, pkg, NULL }, false, NULL), 0);

	/* the install of docs/clients.md: offline, into a venv of Debian's python */
	snprintf(venv, sizeof(venv), "%s/venv", fx.tmp);
	snprintf(py, sizeof(py), "%s/bin/python", venv);
	snprintf(pip, sizeof(pip), "%s/bin/pip", venv);
	assert_int_equal(run((char *[]){ PYTHON, "-m", "venv", venv, NULL }, false, NULL), 0);
	assert_int_equal(run((char *[]){ pip, "install", "--no-index", "--find-links", WHEELS, pkg,
					 NULL },
			     false, NULL),
			 0);

	snprintf(path, sizeof(path), "%s/check.py", fx.tmp);
	assert_int_equal(ktest_write_file(path, script), 0);
	setenv("KTHROTTLE_LIB", lib, 1);
	ktest_asan_preload(); /* for the script only: after venv and pip */
	snprintf(rate_s, sizeof(rate_s), "%g", RATE);
	snprintf(burst_s, sizeof(burst_s), "%d", BURST);
	snprintf(secs_s, sizeof(secs_s), "%g", SECS);
	snprintf(nproc_s, sizeof(nproc_s), "%d", NPROC);
	/* -I: the installed module, not one from the cwd or PYTHONPATH */
	assert_int_equal(run((char *[]){ py, "-I", path, "api", rate_s, burst_s, secs_s, nproc_s,
					 NULL },
			     true, &out),
			 0);
	res = strstr(out, "RESULT {");
	assert_non_null(res);

	/* 4 processes, one limit of 20/s for 5 s: 100 ± 5 plus the burst */
	ran = num(res, "ran");
	none = num(res, "none");
	print_message("ran %.0f (want %.0f ± 5), None %.0f\n", ran, RATE * SECS + BURST, none);
	assert_true(num(res, "exitcodes") == 0);
	assert_true(ran >= RATE * SECS + BURST - 5 && ran <= RATE * SECS + BURST + 5);
	assert_true(none > 0);

	drained = num(res, "drained");
	print_message("should_throttle took %.0f after a refill (burst %d)\n", drained, BURST);
	assert_true(drained >= BURST && drained <= BURST + 1);

	/* about one interval, well under max_delay */
	waited = num(res, "delay_waited");
	print_message("max_delay 0.5: waited %.3f s (interval %.3f s)\n", waited, interval);
	assert_true(num(res, "delay_ran") == 1);
	assert_true(waited >= 0.6 * interval && waited <= 2 * interval);
	assert_non_null(strstr(res, "\"wraps\":\"patient\""));

	/* the bucket it emptied: throttled for at most one interval */
	assert_true(num(res, "thr") == 1);
	assert_true(num(res, "thr_s") > 0 && num(res, "thr_s") <= interval * 1.01);
	assert_true(num(res, "try_ok") == 0);
	assert_true(num(res, "retry_s") > 0 && num(res, "retry_s") <= interval * 1.01);

	/* errors */
	assert_non_null(strstr(res, "\"unknown\":\"kthrottle limit 'no-such-limit': "));
	assert_true(num(res, "unknown_errno") == ENOENT);
	assert_non_null(strstr(res, "unknown config key 'bogus'"));
	assert_non_null(strstr(res, "\"badvalue\":\"kthrottle: max_delay must be"));
	/* the stdlib's exception for each wrong input (none charged the limit:
	 * the burst counts above hold) */
	assert_non_null(strstr(res, "\"bad\":{\"cost_over_burst\":\"ValueError\","
				    "\"cost_bool\":\"TypeError\",\"cost_float\":\"TypeError\","
				    "\"cost_zero\":\"ValueError\",\"cost_neg\":\"ValueError\","
				    "\"delay_nan\":\"ValueError\",\"delay_inf\":\"ValueError\","
				    "\"delay_bool\":\"TypeError\",\"name_long\":\"ValueError\","
				    "\"name_nul\":\"ValueError\",\"name_int\":\"TypeError\","
				    "\"try_over_burst\":\"ValueError\",\"acq_timeout_neg\":\"ValueError\","
				    "\"acq_timeout_nan\":\"ValueError\",\"tq_timeout_bool\":\"TypeError\","
				    "\"tq_timeout_big\":\"ValueError\"}"));
	/* connect: as socket.connect, pair by pair; the last two are valid
	 * addresses with nothing listening */
	assert_non_null(strstr(res, "\"conn\":[[\"OverflowError\",\"OverflowError\"],"
				    "[\"OverflowError\",\"OverflowError\"],[\"OverflowError\",\"OverflowError\"],"
				    "[\"TypeError\",\"TypeError\"],[\"TypeError\",\"TypeError\"],"
				    "[\"TypeError\",\"TypeError\"],[\"TypeError\",\"TypeError\"],"
				    "[\"TypeError\",\"TypeError\"],[\"gaierror\",\"gaierror\"],"
				    "[\"TypeError\",\"TypeError\"],[\"OverflowError\",\"OverflowError\"],"
				    "[\"OverflowError\",\"OverflowError\"],[\"TypeError\",\"TypeError\"],"
				    "[\"ConnectionRefusedError\",\"ConnectionRefusedError\"],"
				    "[\"ConnectionRefusedError\",\"ConnectionRefusedError\"]]"));
	assert_non_null(strstr(res, "\"conn_scope\":\"OverflowError\""));
	free(out);

	/* in-flight slots */
	{
		char slots_s[16];

		snprintf(path, sizeof(path), "%s/slots.py", fx.tmp);
		assert_int_equal(ktest_write_file(path, slots_script), 0);
		snprintf(slots_s, sizeof(slots_s), "%d", SLOTS);
		assert_int_equal(run((char *[]){ py, "-I", path, "llm", fx.cg, slots_s, NULL }, true, &out),
				 0);
		res = strstr(out, "RESULT {");
		assert_non_null(res);
		print_message("in-flight: %.0f calls, at most %.0f at once (slots %d)\n", num(res, "calls"),
			      num(res, "most"), SLOTS);
		assert_true(num(res, "calls") == 4 * 2 * 15);
		assert_true(num(res, "most") <= SLOTS && num(res, "most") >= SLOTS - 1);
		/* 3 held by the other process: 2 free, a third refused */
		assert_true(num(res, "third_free") == 0);
		assert_non_null(strstr(res, "\"reason\":\"inflight\""));
		assert_true(num(res, "after_kill") == SLOTS);
		free(out);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_python_decorator, teardown),
	};

	kt_bpffs.prefix = "kt-pytest";
	return cmocka_run_group_tests(tests, kt_daemonfx_bpffs_group_setup,
				      kt_daemonfx_bpffs_group_teardown);
}
