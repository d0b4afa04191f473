/* test_unit_frozen_ranges -- how the CUDA backend splits a float range at its frozen (bf16-only) weights
 * (backend/frozen_ranges.h), on hand-placed ranges: a range that starts trainable and runs into the frozen tail
 * must be cut where the tail starts (else its fp32 read would touch reserved, unbacked addresses), one inside a
 * frozen range must stop at that range's end, and walking the pieces must cover the range exactly once. */
#include <stdio.h>
#include <string.h>

#include "backend/frozen_ranges.h"
#include "testlib.h"

#define F(i) ((uintptr_t)0x10000 + (uintptr_t)(i) * sizeof(float)) /* address of float i of a fake slab */

/* The pieces of [F(a), F(a + n)) as "len:which " into buf; also checks they cover it exactly. */
static void walk(const tn_frozen_range *r, int nr, size_t a, size_t n, char *buf, size_t cap) {
    size_t at = a, covered = 0, used = 0;
    buf[0] = 0;
    while (covered < n) {
        int which;
        size_t k = tn_frozen_piece(r, nr, F(at), n - covered, &which);
        CHECKF(k > 0, "empty piece at float %zu", at);
        if (!k) return;
        used += (size_t)snprintf(buf + used, cap - used, "%zu:%d ", k, which);
        at += k, covered += k;
    }
    CHECK(covered == n);
}

int main(void) {
    /* a slab of 100 floats whose [60, 100) is frozen, and a second slab frozen at [300, 340) */
    tn_frozen_range r[2] = {{F(60), F(100)}, {F(300), F(340)}};
    char s[256];
    int which;
    walk(r, 2, 0, 50, s, sizeof s); /* all trainable */
    CHECKF(!strcmp(s, "50:-1 "), "%s", s);
    walk(r, 2, 10, 80, s, sizeof s); /* trainable into the frozen tail: cut at 60 */
    CHECKF(!strcmp(s, "50:-1 30:0 "), "%s", s);
    walk(r, 2, 70, 10, s, sizeof s); /* inside the tail */
    CHECKF(!strcmp(s, "10:0 "), "%s", s);
    walk(r, 2, 90, 220, s, sizeof s); /* frozen, past its end, plain, into the other slab's frozen part */
    CHECKF(!strcmp(s, "10:0 200:-1 10:1 "), "%s", s);
    walk(r, 2, 0, 400, s, sizeof s); /* the nearest frozen start cuts, whatever the table's order */
    CHECKF(!strcmp(s, "60:-1 40:0 200:-1 40:1 60:-1 "), "%s", s);
    tn_frozen_range rev[2] = {r[1], r[0]};
    walk(rev, 2, 0, 400, s, sizeof s);
    CHECKF(!strcmp(s, "60:-1 40:1 200:-1 40:0 60:-1 "), "%s", s);
    CHECK(tn_frozen_piece(r, 2, F(5), 0, &which) == 0 && which == -1);
    /* touches: any float, not only the first */
    CHECK(!tn_frozen_touches(r, 2, F(0), 60));
    CHECK(tn_frozen_touches(r, 2, F(0), 61));
    CHECK(tn_frozen_touches(r, 2, F(99), 1));
    CHECK(!tn_frozen_touches(r, 2, F(100), 200));
    CHECK(!tn_frozen_touches(r, 2, F(59), 0));
    CHECK(!tn_frozen_touches(r, 0, F(0), 1000));
    return tl_done("test_unit_frozen_ranges");
}
