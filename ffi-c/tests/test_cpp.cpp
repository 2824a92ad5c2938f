// The header from C++: compiles with -Wall -Wextra -Werror, and a small
// RAII wrapper runs against the library.
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "ratomic.h"

namespace {

struct limiter_deleter {
    void operator()(ratomic_limiter *l) const noexcept { ratomic_limiter_free(l); }
};
using limiter_ptr = std::unique_ptr<ratomic_limiter, limiter_deleter>;

int failures = 0;
int passes = 0;

void check(bool ok, const char *what) {
    if (ok) {
        ++passes;
    } else {
        ++failures;
        std::fprintf(stderr, "CHECK failed: %s\n", what);
    }
}

struct manual_clock {
    uint64_t now_ns = 0;
    static uint64_t read(void *self) noexcept { return static_cast<manual_clock *>(self)->now_ns; }
    // ratomic_acquire's wait: move the clock instead of sleeping.
    static void sleep(void *self, uint64_t ns) noexcept { static_cast<manual_clock *>(self)->now_ns += ns; }
};

ratomic_decision allow(const limiter_ptr &l, const std::string &key, uint64_t cost = 1) {
    ratomic_decision d{};
    ratomic_result rc = ratomic_allow(l.get(), reinterpret_cast<const uint8_t *>(key.data()), key.size(), cost, &d);
    check(rc == RATOMIC_OK, "allow returns RATOMIC_OK");
    return d;
}

}  // namespace

int main() {
    manual_clock clock;
    ratomic_options options{};
    options.clock = &manual_clock::read;
    options.clock_user_data = &clock;
    options.clock_sleep = &manual_clock::sleep;
    options.eviction = RATOMIC_EVICTION_STRICT;

    ratomic_limiter *raw = nullptr;
    check(ratomic_token_bucket_from_rate("2/s", &options, &raw) == RATOMIC_OK, "from_rate");
    limiter_ptr l(raw);

    check(allow(l, "user").allowed, "first");
    check(allow(l, "user").allowed, "second");
    ratomic_decision d = allow(l, "user");
    check(!d.allowed && d.retry_after_ns == 500000000u, "third waits 500 ms");
    clock.now_ns += d.retry_after_ns;
    check(allow(l, "user").allowed, "after the wait");

    ratomic_limit_spec specs[] = {{"burst", "2/s", RATOMIC_ALGORITHM_TOKEN_BUCKET},
                                  {"minute", "3/min", RATOMIC_ALGORITHM_FIXED_WINDOW}};
    check(ratomic_multi_limiter_new(specs, 2, &options, &raw) == RATOMIC_OK, "multi");
    limiter_ptr multi(raw);
    ratomic_limit_decision entries[2];
    size_t n = 0;
    const std::string key = "k";
    for (int i = 0; i < 3; i++) {
        ratomic_allow_detailed(multi.get(), reinterpret_cast<const uint8_t *>(key.data()), key.size(), 1, &d,
                               entries, 2, &n);
    }
    check(!d.allowed && n == 2 && std::strcmp(entries[0].name, "burst") == 0 && !entries[0].decision.allowed,
          "burst denies the third");

    // acquire waits on the manual clock: 500 ms for the next token.
    const uint64_t before = clock.now_ns;
    ratomic_allow(l.get(), reinterpret_cast<const uint8_t *>("user"), 4, 1, &d);
    check(!d.allowed, "drained");
    check(ratomic_acquire(l.get(), reinterpret_cast<const uint8_t *>("user"), 4, 1, RATOMIC_NO_TIMEOUT, &d) ==
                  RATOMIC_OK &&
              d.allowed && clock.now_ns == before + 500000000u,
          "acquire waits 500 ms of the clock's time");

    // Every limit reads back.
    ratomic_limit_info info{};
    check(ratomic_limit_get(multi.get(), 1, &info) == RATOMIC_OK && std::strcmp(info.name, "minute") == 0 &&
              info.algorithm == RATOMIC_ALGORITHM_FIXED_WINDOW && info.limit == 3 && info.period_ns == 60000000000u,
          "limit_get");

    // A batch with a bad request fails whole, naming it.
    ratomic_request reqs[2] = {{reinterpret_cast<const uint8_t *>("a"), 1, 1},
                               {reinterpret_cast<const uint8_t *>("b"), 1, 9}};
    ratomic_decision ds[2]{};
    size_t index = 0;
    ratomic_result why = RATOMIC_OK;
    check(ratomic_allow_many(multi.get(), reqs, 2, ds) == RATOMIC_INVALID_REQUEST &&
              ratomic_last_error_request(&index, &why) == RATOMIC_OK && index == 1 &&
              why == RATOMIC_COST_EXCEEDS_LIMIT,
          "batch fails whole");

    ratomic_result rc = ratomic_token_bucket_from_rate("10/x", nullptr, &raw);
    check(rc == RATOMIC_INVALID_RATE, "bad rate");
    check(std::strlen(ratomic_result_message(rc)) > 0, "message");

    std::printf("test_cpp: %d passed, %d failed\n", passes, failures);
    return failures == 0 ? 0 : 1;
}
