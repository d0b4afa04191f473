/* oom -- out of memory says out of memory, naming what was being loaded.
 *
 * A failed allocation deep in a loader (cJSON building a 10 MB tokenizer.json under `ulimit -v`, say) must not
 * come out as "invalid JSON at line 91222": cJSON returns NULL for both, so its allocations go through a hook that
 * remembers a failure, and a parser's caller asks tn_json_oom() before blaming the file's syntax. A loader also
 * names what it loads (tn_loading), which the fatal out-of-memory line of tn_xmalloc and friends then includes. */
#ifndef TN_OOM_H
#define TN_OOM_H

#include <stddef.h>

/* What this thread is loading from now on ("tokenizer.json at PATH"); NULL: nothing. Returns the previous one, to
 * restore when done. */
const char *tn_loading(const char *what);
/* "tandem: error: out of memory allocating N bytes[ while loading WHAT]" and exit(1). */
_Noreturn void tn_die_oom(size_t bytes);

/* Before a cJSON parse: installs the hooks (once per process) and clears this thread's failure flag. */
void tn_json_oom_reset(void);
/* An allocation of cJSON's failed on this thread since tn_json_oom_reset. */
int tn_json_oom(void);

#endif
