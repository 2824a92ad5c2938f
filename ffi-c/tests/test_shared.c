/* ratomic_options.shared_file: limiters in different processes sharing
 * one file. Real processes (fork), real SIGKILLs, no sleeps. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

#define SLOW (1.0 / 3600.0) /* one token an hour: no refill during a test */

static char dir[64];

static void path_of(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

static ratomic_options shared_options(const char *path) {
    ratomic_options o;
    memset(&o, 0, sizeof o);
    o.max_keys = 1000;
    o.shared_file = path;
    return o;
}

enum kind { BUCKET, WINDOW, MULTI };

static ratomic_result build(enum kind k, const char *path, ratomic_limiter **out) {
    ratomic_options o = shared_options(path);
    static const ratomic_limit_spec limits[2] = {
        {"burst", "1000/s", RATOMIC_ALGORITHM_TOKEN_BUCKET},
        {"slow", "50/h", RATOMIC_ALGORITHM_TOKEN_BUCKET},
    };
    switch (k) {
    case BUCKET: return ratomic_token_bucket_new(50, SLOW, &o, out);
    case WINDOW: return ratomic_fixed_window_new(50, 3600 * NS_PER_SEC, &o, out);
    default: return ratomic_multi_limiter_new(limits, 2, &o, out);
    }
}

static int allowed(ratomic_limiter *l, const char *key) {
    ratomic_decision d;
    if (ratomic_allow(l, KEY(key), 1, &d) != RATOMIC_OK) _exit(3);
    return d.allowed;
}

/* Eight children race on one key, each with its own limiter on the file. */
static void test_race(enum kind k, const char *name) {
    char path[128];
    path_of(path, sizeof path, name);
    ratomic_limiter *first = NULL;
    CHECK_OK(build(k, path, &first)); /* made once, before the race */
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t kids[8];
    for (int i = 0; i < 8; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            ratomic_limiter *l = NULL;
            if (build(k, path, &l) != RATOMIC_OK) _exit(2);
            uint32_t n = 0;
            for (int c = 0; c < 200; c++) n += (uint32_t)allowed(l, "key");
            ratomic_limiter_free(l);
            if (write(fds[1], &n, sizeof n) != sizeof n) _exit(4);
            _exit(0);
        }
    }
    close(fds[1]);
    uint32_t total = 0, n;
    while (read(fds[0], &n, sizeof n) == sizeof n) total += n;
    close(fds[0]);
    for (int i = 0; i < 8; i++) {
        int status = 0;
        CHECK(waitpid(kids[i], &status, 0) == kids[i] && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    CHECK(total == 50);
    CHECK(!allowed(first, "key")); /* empty in the parent too */
    ratomic_limiter_free(first);
}

/* A child making `calls` calls on 20 keys, writing each granted key's index
 * to `fd` before its next call. */
static pid_t traffic(const char *path, int fd, int calls) {
    pid_t pid = fork();
    if (pid == 0) {
        ratomic_limiter *l = NULL;
        if (build(BUCKET, path, &l) != RATOMIC_OK) _exit(2);
        for (int c = 0; c < calls; c++) {
            char key[16];
            uint8_t k = (uint8_t)(((unsigned)c * 7919u + (unsigned)getpid()) % 20u);
            snprintf(key, sizeof key, "k%u", k);
            if (allowed(l, key) && write(fd, &k, 1) != 1) _exit(4);
        }
        _exit(0);
    }
    return pid;
}

static void test_kills(void) {
    char path[128];
    path_of(path, sizeof path, "kill.shm");
    unsigned granted[20] = {0};
    unsigned kills = 0;
    for (int round = 0; round < 5; round++) {
        int v[2], s[2];
        CHECK(pipe(v) == 0 && pipe(s) == 0);
        pid_t victim = traffic(path, v[1], 200000);
        pid_t survivor = traffic(path, s[1], 300);
        close(v[1]);
        close(s[1]);
        /* Kill the victim mid-traffic, right after a grant. */
        uint8_t k;
        int seen = 0;
        while (read(v[0], &k, 1) == 1) {
            granted[k % 20]++;
            if (++seen == 3 + round) { /* (if the keys run dry first, it just ends) */
                kill(victim, SIGKILL);
                kills++;
            }
        }
        close(v[0]);
        while (read(s[0], &k, 1) == 1) granted[k % 20]++;
        close(s[0]);
        int status = 0;
        CHECK(waitpid(survivor, &status, 0) == survivor && WIFEXITED(status) && WEXITSTATUS(status) == 0);
        CHECK(waitpid(victim, &status, 0) == victim);
    }
    /* The file still works: a new limiter drains every key. */
    ratomic_limiter *l = NULL;
    CHECK_OK(build(BUCKET, path, &l));
    unsigned total = 0;
    for (unsigned k = 0; k < 20; k++) {
        char key[16];
        snprintf(key, sizeof key, "k%u", k);
        while (allowed(l, key)) granted[k]++;
        CHECK(granted[k] <= 50);
        total += granted[k];
    }
    /* Each kill may lose one grant made but not yet reported: never more. */
    CHECK(total <= 1000 && total + kills >= 1000);
    size_t dropped = 99;
    CHECK_OK(ratomic_gc(l, &dropped));
    CHECK(dropped == 0);
    ratomic_limiter_free(l);
}

static void expect_refused(ratomic_result rc, const char *needle) {
    char msg[2048];
    ratomic_last_error_message(msg, sizeof msg, NULL);
    CHECK(rc == RATOMIC_INVALID_ARGUMENT);
    if (strstr(msg, needle) == NULL) {
        checks_failed++;
        fprintf(stderr, "expected \"%s\" in: %s\n", needle, msg);
    }
}

static void test_refusals(void) {
    char path[128], link[128], open_path[128], cmd[400];
    path_of(path, sizeof path, "rule.shm");
    ratomic_limiter *l = NULL, *other = NULL;
    CHECK_OK(build(BUCKET, path, &l));
    CHECK(allowed(l, "a"));
    ratomic_options o = shared_options(path);
    expect_refused(ratomic_token_bucket_new(60, SLOW, &o, &other), "different rule");
    CHECK(other == NULL);
    expect_refused(build(WINDOW, path, &other), "different rule");
    path_of(link, sizeof link, "link.shm");
    CHECK(symlink(path, link) == 0);
    expect_refused(build(BUCKET, link, &other), "symbolic link");
    path_of(open_path, sizeof open_path, "open.shm");
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", path, open_path);
    CHECK(system(cmd) == 0);
    CHECK(chmod(open_path, 0644) == 0);
    expect_refused(build(BUCKET, open_path, &other), "other users");
    o.shared_file = "";
    expect_refused(ratomic_token_bucket_new(50, SLOW, &o, &other), "cannot be opened");
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
    ratomic_limiter_free(l);
}

static uint64_t manual_now(void *user_data) { return *(uint64_t *)user_data; }

/* Issue 35: a clock of its own on a shared file was accepted, and one
 * process's times then locked a key for everyone else. */
static void test_clock_refused(void) {
    char path[128];
    path_of(path, sizeof path, "clock.shm");
    ratomic_options o = shared_options(path);
    uint64_t now = 0;
    o.clock = manual_now;
    o.clock_user_data = &now;
    ratomic_limiter *l = NULL;
    expect_refused(ratomic_token_bucket_new(5, 1.0, &o, &l), "monotonic clock");
    CHECK(l == NULL);
    struct stat st;
    CHECK(stat(path, &st) != 0 && errno == ENOENT); /* no file made */
}

/* Issue 36: a new limit on a file nobody uses any more is made anew; while
 * one is in use, the error names both limiters and the fix. */
static void test_new_limit(void) {
    char path[128];
    path_of(path, sizeof path, "limit.shm");
    ratomic_limiter *old = NULL, *fresh = NULL;
    CHECK_OK(build(BUCKET, path, &old));
    CHECK(allowed(old, "a"));
    ratomic_options o = shared_options(path);
    expect_refused(ratomic_token_bucket_new(60, SLOW, &o, &fresh), "token bucket 50 per");
    expect_refused(ratomic_token_bucket_new(60, SLOW, &o, &fresh), "rm -- '");
    ratomic_limiter_free(old);
    CHECK_OK(ratomic_token_bucket_new(60, SLOW, &o, &fresh));
    int n = 0;
    for (int i = 0; i < 70; i++) n += allowed(fresh, "a");
    CHECK(n == 60); /* made anew: key a is full */
    ratomic_limiter_free(fresh);
}

/* Issue 35: a full file system killed the process with SIGBUS. Root only:
 * it mounts a 1 MiB tmpfs. */
static void test_full_file_system(void) {
    if (geteuid() != 0) {
        fprintf(stderr, "SKIPPED test_full_file_system: mounting a tmpfs needs root\n");
        return;
    }
    char fs[128], path[160], cmd[400];
    path_of(fs, sizeof fs, "tmpfs");
    CHECK(mkdir(fs, 0700) == 0);
    snprintf(cmd, sizeof cmd, "mount -t tmpfs -o size=1m tmpfs '%s'", fs);
    CHECK(system(cmd) == 0);
    snprintf(path, sizeof path, "%s/limits.shm", fs);
    ratomic_options o = shared_options(path);
    o.max_keys = 100000; /* a 5 MiB file */
    ratomic_limiter *l = NULL;
    CHECK_OK(ratomic_token_bucket_new(5, SLOW, &o, &l));
    ratomic_decision d;
    ratomic_result rc = RATOMIC_OK;
    int n = 0;
    char key[32];
    while (rc == RATOMIC_OK) {
        int len = snprintf(key, sizeof key, "key%d", n++);
        rc = ratomic_allow(l, (const uint8_t *)key, (size_t)len, 1, &d);
    }
    CHECK(rc == RATOMIC_SHARED_FILE && n > 100);
    char msg[512];
    ratomic_last_error_message(msg, sizeof msg, NULL);
    CHECK(strstr(msg, "the file system holding it is full") != NULL);
    CHECK(ratomic_allow(l, KEY("key0"), 1, &d) == RATOMIC_OK && d.remaining == 3); /* held keys work on */
    ratomic_limiter_free(l);
    snprintf(cmd, sizeof cmd, "umount '%s'", fs);
    CHECK(system(cmd) == 0);
}

int main(void) {
    strcpy(dir, "/tmp/ratomic-shm-XXXXXX");
    if (mkdtemp(dir) == NULL) return 1;
    test_race(BUCKET, "bucket.shm");
    test_race(WINDOW, "window.shm");
    test_race(MULTI, "multi.shm");
    test_kills();
    test_refusals();
    test_clock_refused();
    test_new_limit();
    test_full_file_system();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) return 1;
    return finish("test_shared");
}
