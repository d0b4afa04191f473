/* fuzz_lf_dataset -- LLaMA-Factory data files (src/data/lf_formats.c): JSON arrays, JSON lines and txt
 * records aligned by lf_align_dataset. The first input byte picks the dataset attributes (one of five
 * column/tag layouts of dataset_info.json), the file type (json or txt) and max_samples (0..7); the
 * rest is the file's bytes. */
#include "fuzz_lf_common.h"

#define S(x) (char *)(x)
static lf_dsattr DS[5] = {
    /* alpaca, every column (LF's default names plus history/system/tools) */
    {.name = S("alpaca"), .file_name = S("a.json"), .formatting = LF_ALPACA, .prompt = S("instruction"), .query = S("input"),
     .response = S("output"), .history = S("history"), .system = S("system"), .tools = S("tools")},
    /* alpaca, LF's default columns only */
    {.name = S("plain"), .file_name = S("p.json"), .formatting = LF_ALPACA, .prompt = S("instruction"), .query = S("input"),
     .response = S("output")},
    /* pre-training text: prompt column "text" */
    {.name = S("pt"), .file_name = S("t.txt"), .formatting = LF_ALPACA, .prompt = S("text")},
    /* sharegpt, LF's default tags */
    {.name = S("sharegpt"), .file_name = S("s.json"), .formatting = LF_SHAREGPT, .messages = S("conversations"),
     .system = S("system"), .tools = S("tools"), .role_tag = S("from"), .content_tag = S("value"), .user_tag = S("human"),
     .assistant_tag = S("gpt"), .observation_tag = S("observation"), .function_tag = S("function_call"),
     .system_tag = S("system")},
    /* sharegpt in OpenAI layout */
    {.name = S("openai"), .file_name = S("o.jsonl"), .formatting = LF_SHAREGPT, .messages = S("messages"),
     .role_tag = S("role"), .content_tag = S("content"), .user_tag = S("user"), .assistant_tag = S("assistant"),
     .observation_tag = S("tool"), .system_tag = S("system")},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_lf_init();
    if (size < 1) return 0;
    unsigned sel = data[0];
    const lf_dsattr *ds = &DS[sel % 5];
    int type = (sel >> 3) & 1 ? LF_FILE_TXT : LF_FILE_JSON;
    char *bytes = fz_cstr(data + 1, size - 1);
    fz_align(ds, type == LF_FILE_TXT ? "mem/data.txt" : "mem/data.json", bytes, size - 1, type, (int)(sel >> 4) & 7);
    free(bytes);
    return 0;
}
