/* fuzz_lf_dsinfo -- dataset_info.json (src/data/lf_dataset_info.c): the input's first line is the
 * `dataset` key (a comma list of names), the rest is written as DIR/dataset_info.json for
 * lf_dsinfo_load. Every entry that loads is then aligned (lf_align_dataset) against two fixed files
 * that hold LF's default columns, so the entry's columns and tags are exercised too. */
#include "fuzz_lf_common.h"

static const char DATA_JSON[] =
    "[{\"instruction\": \"hi\", \"input\": \"x\", \"output\": \"yo\", \"history\": [[\"q\", \"a\"], [\"r\", null]],"
    " \"system\": \"be brief\", \"tools\": [{\"name\": \"f\", \"parameters\": {}}], \"sys\": \"S\", \"text\": \"plain\","
    " \"conversations\": [{\"from\": \"system\", \"value\": \"s\"}, {\"from\": \"human\", \"value\": \"hi\"},"
    " {\"from\": \"function_call\", \"value\": \"{}\"}, {\"from\": \"observation\", \"value\": \"1\"}, {\"from\": \"gpt\", \"value\": \"ok\"}],"
    " \"messages\": [{\"role\": \"user\", \"content\": \"u\"}, {\"role\": \"assistant\", \"content\": \"a\"}]},"
    " {\"instruction\": \"b\", \"output\": null, \"conversations\": [{\"from\": \"gpt\", \"value\": \"x\"}], \"tools\": \"[]\"},"
    " {\"conversations\": [], \"messages\": [{\"role\": \"user\"}, {\"role\": \"assistant\", \"content\": null}]}]";
static const char DATA_TXT[] = "first line\r\nsecond\rthird\n\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_lf_init();
    const uint8_t *nl = memchr(data, '\n', size);
    if (!nl) return 0;
    char *names = fz_cstr(data, (size_t)(nl - data));
    char *p = fz_path("dataset_info.json");
    fz_write(p, nl + 1, size - (size_t)(nl + 1 - data));
    lf_dsinfo info;
    fz_err_reset();
    if (lf_dsinfo_load(fz_dir(), names, &info) != 0) {
        fz_check_error(NULL);  /* names a bad `dataset` list or the file */
        FZ_ASSERT(info.ds == NULL && info.text == NULL);
    } else {
        FZ_ASSERT(info.n >= 1);
        for (int i = 0; i < info.n; i++) {
            const lf_dsattr *d = &info.ds[i];
            FZ_ASSERT(d->name && d->file_name && d->file_name[0]);
            FZ_ASSERT(d->entry >= info.text && d->entry_len >= 2);
            FZ_ASSERT(d->formatting == LF_ALPACA || (d->messages && d->role_tag && d->content_tag));
            fz_align(d, "mem/data.json", DATA_JSON, sizeof DATA_JSON - 1, LF_FILE_JSON, 0);
            fz_align(d, "mem/data.txt", DATA_TXT, sizeof DATA_TXT - 1, LF_FILE_TXT, 2);
        }
        lf_dsinfo_free(&info);
    }
    free(p);
    free(names);
    return 0;
}
