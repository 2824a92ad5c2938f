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

struct direct_deleter {
    void operator()(ratomic_direct *d) const noexcept { ratomic_direct_free(d); }
};
using direct_ptr = std::unique_ptr<ratomic_direct, direct_deleter>;

struct stack_deleter {
    void operator()(ratomic_stack *s) const noexcept { ratomic_stack_free(s); }
};
using stack_ptr = std::unique_ptr<ratomic_stack, stack_deleter>;

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

    // A direct bucket (no key): alone, with headers, and as a stack member.
    ratomic_direct *raw_direct = nullptr;
    check(ratomic_direct_token_bucket_new(2, 2.0, &options, &raw_direct) == RATOMIC_OK, "direct");
    direct_ptr global(raw_direct);
    check(ratomic_direct_allow(global.get(), 2, &d) == RATOMIC_OK && d.allowed && d.remaining == 0, "direct burst");
    check(ratomic_direct_allow(global.get(), 1, &d) == RATOMIC_OK && !d.allowed && d.retry_after_ns == 500000000u,
          "direct denies, 500 ms to wait");
    char text[256];
    size_t text_len = 0;
    check(ratomic_direct_headers(global.get(), "global", &d, false, text, sizeof text, &text_len) == RATOMIC_OK &&
              std::string(text, text_len) ==
                  "RateLimit-Policy: \"global\";q=2;w=1\r\nRateLimit: \"global\";r=0;t=1\r\nRetry-After: 1\r\n",
          "direct headers");
    check(ratomic_direct_reset(global.get()) == RATOMIC_OK, "direct reset");
    check(ratomic_direct_allow(global.get(), 1, &d) == RATOMIC_OK && d.allowed && d.remaining == 1, "full again");
    const ratomic_stack_member members[] = {{"user", l.get(), nullptr}, {"global", nullptr, global.get()}};
    ratomic_stack *raw_stack = nullptr;
    check(ratomic_stack_new_members(members, 2, &options, &raw_stack) == RATOMIC_OK, "stack with a direct member");
    stack_ptr stack(raw_stack);
    global.reset();  // the stack keeps the bucket alive
    const ratomic_key keys[] = {{reinterpret_cast<const uint8_t *>("stack-user"), 10}, {nullptr, 0}};
    ratomic_limit_decision stack_entries[2];
    check(ratomic_stack_allow(stack.get(), keys, 2, 1, &d, stack_entries, 2, &n) == RATOMIC_OK && d.allowed &&
              n == 2 && stack_entries[1].decision.remaining == 0,
          "the stack takes the direct member's last token");
    check(ratomic_stack_allow(stack.get(), keys, 2, 1, &d, stack_entries, 2, &n) == RATOMIC_OK && !d.allowed &&
              std::strcmp(stack_entries[1].name, "global") == 0 && !stack_entries[1].decision.allowed &&
              stack_entries[0].decision.allowed,
          "the direct member denies, the user is not charged");

    ratomic_result rc = ratomic_token_bucket_from_rate("10/x", nullptr, &raw);
    check(rc == RATOMIC_INVALID_RATE, "bad rate");
    check(std::strlen(ratomic_result_message(rc)) > 0, "message");

    std::printf("test_cpp: %d passed, %d failed\n", passes, failures);
    return failures == 0 ? 0 : 1;
}
