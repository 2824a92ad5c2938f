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

    ratomic_result rc = ratomic_token_bucket_from_rate("10/x", nullptr, &raw);
    check(rc == RATOMIC_INVALID_RATE, "bad rate");
    check(std::strlen(ratomic_result_message(rc)) > 0, "message");

    std::printf("test_cpp: %d passed, %d failed\n", passes, failures);
    return failures == 0 ? 0 : 1;
}
