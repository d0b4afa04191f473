/* fuzz_hostfile -- tn_hostfile_parse (src/launch/hostfile.c) on arbitrary text.
 * Accepted: at least one host, names valid and unique, slots in 1..4096, total_slots their sum. */
#include <ctype.h>

#include "fuzz_util.h"
#include "launch/hostfile.h"

#define PATH "fuzz/hostfile"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = fz_cstr(data, size);
    tn_hostfile hf;
    fz_err_reset();
    if (tn_hostfile_parse(text, PATH, &hf) != 0) {
        fz_check_error(PATH);
        FZ_ASSERT(hf.hosts == NULL);
    } else {
        FZ_ASSERT(hf.n > 0);
        int total = 0;
        for (int i = 0; i < hf.n; i++) {
            const tn_host *h = &hf.hosts[i];
            FZ_ASSERT(h->slots >= 1 && h->slots <= 4096 && h->line >= 1);
            FZ_ASSERT(memchr(h->name, '\0', sizeof h->name) && h->name[0]);
            for (const char *p = h->name; *p; p++) FZ_ASSERT(isalnum((unsigned char)*p) || strchr(".-_:", *p));
            for (int j = 0; j < i; j++) FZ_ASSERT(strcmp(hf.hosts[j].name, h->name) != 0);
            total += h->slots;
        }
        FZ_ASSERT(total == hf.total_slots);
    }
    tn_hostfile_free(&hf);
    free(text);
    return 0;
}
