/* Shared helpers for ratomic's C tests: checks that count, and a manual
 * clock for the ratomic_options callback so no test ever sleeps. */
#ifndef RATOMIC_TEST_COMMON_H
#define RATOMIC_TEST_COMMON_H

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ratomic.h"

static int checks_passed = 0;
static int checks_failed = 0;

#define CHECK(cond)                                                           \
    do {                                                                      \
        if (cond) {                                                           \
            checks_passed++;                                                  \
        } else {                                                              \
            checks_failed++;                                                  \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, \
                    #cond);                                                   \
        }                                                                     \
    } while (0)

/* A call that must return `code`; prints the library's message otherwise. */
#define CHECK_RC(code, call)                                                  \
    do {                                                                      \
        ratomic_result rc_ = (call);                                          \
        if (rc_ == (code)) {                                                  \
            checks_passed++;                                                  \
        } else {                                                              \
            char msg_[256];                                                   \
            ratomic_last_error_message(msg_, sizeof msg_, NULL);              \
            checks_failed++;                                                  \
            fprintf(stderr, "%s:%d: %s returned %u (%s; last error: %s), "    \
                    "expected %s\n", __FILE__, __LINE__, #call,               \
                    (unsigned)rc_, ratomic_result_message(rc_), msg_, #code); \
        }                                                                     \
    } while (0)

#define CHECK_OK(call) CHECK_RC(RATOMIC_OK, call)

/* This thread's last error message contains `part`. */
static inline int last_error_has(const char *part) {
    char msg[512];
    CHECK_OK(ratomic_last_error_message(msg, sizeof msg, NULL));
    if (strstr(msg, part) != NULL) return 1;
    fprintf(stderr, "last error \"%s\" does not contain \"%s\"\n", msg, part);
    return 0;
}

/* Prints the closing line and returns the process's exit status. */
static inline int finish(const char *name) {
    printf("%s: %d passed, %d failed\n", name, checks_passed, checks_failed);
    return checks_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

/* A clock that moves only when told to. */
typedef struct {
    _Atomic uint64_t now_ns;
} manual_clock;

static inline uint64_t manual_clock_read(void *user_data) {
    manual_clock *c = (manual_clock *)user_data;
    return atomic_load(&c->now_ns);
}

static inline void manual_clock_advance(manual_clock *c, uint64_t ns) {
    atomic_fetch_add(&c->now_ns, ns);
}

static inline ratomic_options manual_clock_options(manual_clock *c) {
    ratomic_options o;
    memset(&o, 0, sizeof o);
    o.clock = manual_clock_read;
    o.clock_user_data = c;
    return o;
}

#define KEY(s) (const uint8_t *)(s), strlen(s)

#define NS_PER_SEC 1000000000ull

#endif
