/* test_unit_balance -- the split of the global batch over ranks of unequal speed (src/trainer/balance.h),
 * against shares derived by hand from its model (step of rank r = fixed[r] + per[r] x share[r], equalised,
 * each move at most a quarter of a share, only when the predicted step shrinks by >= 3%). */
#include <stdint.h>
#include <string.h>

#include "testlib.h"
#include "trainer/balance.h"

static int same(const int64_t *a, const int64_t *b, int n) { return memcmp(a, b, (size_t)n * sizeof *a) == 0; }

int main(void) {
    int64_t out[3];
    /* rank 1 three times slower, global 16: the ideal is 12 / 4 (T = 16 / (1 + 1/3) = 12). From 8 / 8 a move
     * of 4 exceeds the bound 2, so half the way: 10 / 6; then 11.5 / 4.5 (a = 0.75) -> 11 + 4, the leftover
     * sample to the tie's lower rank: 12 / 4; then nothing changes. */
    double fixed0[2] = {0, 0}, per[2] = {1, 3};
    int64_t cur[2] = {8, 8};
    CHECK(tn_balance_split(2, 16, fixed0, per, cur, out) == 1 && out[0] == 10 && out[1] == 6);
    memcpy(cur, out, sizeof cur);
    CHECK(tn_balance_split(2, 16, fixed0, per, cur, out) == 1 && out[0] == 12 && out[1] == 4);
    memcpy(cur, out, sizeof cur);
    CHECK(tn_balance_split(2, 16, fixed0, per, cur, out) == 0 && same(out, cur, 2));
    CHECK(tn_balance_predict(2, fixed0, per, cur) == 12.0);
    /* a fixed cost on rank 0: fixed + x = T, x0 + x1 = 10 -> T = 6, shares 4 / 6 (a move of 1 <= 1.25) */
    double fixed1[2] = {2, 0}, even[2] = {1, 1};
    int64_t five[2] = {5, 5};
    CHECK(tn_balance_split(2, 10, fixed1, even, five, out) == 1 && out[0] == 4 && out[1] == 6);
    /* equal ranks, and a 2% difference (below the 3% gain): no change */
    CHECK(tn_balance_split(2, 10, fixed0, even, five, out) == 0 && same(out, five, 2));
    double close[2] = {1, 1.02};
    CHECK(tn_balance_split(2, 10, fixed0, close, five, out) == 0 && same(out, five, 2));
    /* a rank whose fixed time alone is beyond the others' whole step is pinned at one sample; here the
     * prediction barely moves (105 -> 104), so nothing changes */
    double huge[2] = {100, 0};
    CHECK(tn_balance_split(2, 10, huge, even, five, out) == 0 && same(out, five, 2));
    /* three ranks 1 : 2 : 4 times slower per sample, global 21: T = 21 / (1 + 1/2 + 1/4) = 12, ideal
     * 12 / 6 / 3; from 7 / 7 / 7 the bound 1.75 against rank 0's move of 5 gives a = 0.35:
     * 8.75 / 6.65 / 5.6 -> 8 + 6 + 5 = 19, the two leftovers to the largest fractions (0.75, 0.65): 9 / 7 / 5 */
    double fixed3[3] = {0, 0, 0}, per3[3] = {1, 2, 4};
    int64_t seven[3] = {7, 7, 7};
    CHECK(tn_balance_split(3, 21, fixed3, per3, seven, out) == 1 && out[0] == 9 && out[1] == 7 && out[2] == 5);
    /* no measurement yet (per 0): nothing changes */
    double none[2] = {0, 1};
    CHECK(tn_balance_split(2, 10, fixed0, none, five, out) == 0 && same(out, five, 2));
    return tl_done("test_unit_balance");
}
