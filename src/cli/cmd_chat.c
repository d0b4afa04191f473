/* cmd_chat.c -- `tandem chat CONFIG.yaml [key=value ...]` and `tandem generate CONFIG.yaml [key=value ...]
 * --prompt TEXT [--stats]`: try what was trained, as `llamafactory-cli chat` does.
 *
 * The YAML is LLaMA-Factory's inference YAML: model_name_or_path, adapter_name_or_path (the LoRA output of a run;
 * merged into the weights for speed), template, default_system, and the generation keys do_sample, temperature,
 * top_p, top_k, repetition_penalty, max_new_tokens (LLaMA-Factory's defaults). Prompts go through the same
 * template code as training, so the model sees exactly the ids it was trained on. Answers stream as they are
 * generated; chat keeps the conversation's KV cache between turns, so a turn computes only its new tokens. A line
 * "clear" starts a new conversation, "exit" (or end of input) leaves. An empty prompt or message is refused in one
 * line; generation that shows nothing for a few seconds prints a progress line on stderr (quiet_watch.h).
 * Vision-language models: `--image FILE` (repeatable) gives the prompt's images (generate; chat: its first turn),
 * prepared as training prepares them (the model folder's preprocessor_config.json, the YAML's image_max_pixels and
 * image_min_pixels); each `<image>` of the text takes the next one, expanded as in training (LLaMA-Factory's
 * mm_plugin), and a text without `<image>` gets them in front. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/commands.h"
#include "config/train_config.h"
#include "core/core.h"
#include "data/image.h"
#include "data/vl_processor.h"
#include "infer/infer.h"
#include "outputs/quiet_watch.h"

#define MAX_IMAGES 16

typedef struct {                /* the --image files, prepared */
    const char *file[MAX_IMAGES];
    int n, tokens[MAX_IMAGES];
    int32_t grid[3 * MAX_IMAGES], row[MAX_IMAGES];
    float *pix;
    tn_mm_batch mm;
} chat_images;

/* Each --image through LLaMA-Factory's limits, smart_resize, bicubic and patchify (the model's processor). */
static int prepare_images(const tn_train_config *cfg, const tn_model *m, chat_images *ci) {
    if (!ci->n) return 0;
    if (m->cfg.vis.kind == TN_VL_NONE)
        return tn_err("--image: model_type %s takes no images (a vision-language model is needed)", m->cfg.model_type);
    tn_vl_proc p;
    char *pp = tn_path_join(cfg->model_name_or_path, "preprocessor_config.json");
    int rc = tn_vl_proc_load(pp, &p);
    free(pp);
    if (rc == 0) rc = tn_vl_proc_set_lf_limits(&p, cfg->image_max_pixels, cfg->image_min_pixels); /* as training */
    if (rc != 0) return -1;
    size_t total = 0, dim = (size_t)tn_vl_patch_dim(&p);
    for (int i = 0; i < ci->n; i++) {
        tn_image im, out;
        if (tn_image_load(ci->file[i], &im) != 0 || tn_vl_prepare(&p, &im, ci->file[i], &out) != 0)
            return tn_err("--image %s: %s", ci->file[i], tn_errmsg());
        int gh = out.h / p.patch_size, gw = out.w / p.patch_size;
        ci->grid[3 * i] = 1, ci->grid[3 * i + 1] = gh, ci->grid[3 * i + 2] = gw, ci->row[i] = 0;
        ci->tokens[i] = tn_vl_image_tokens(&p, out.h, out.w);
        ci->pix = tn_xrealloc(ci->pix, (total + (size_t)gh * gw * dim) * sizeof *ci->pix);
        tn_vl_patchify(&p, out.px, out.h, out.w, ci->pix + total);
        total += (size_t)gh * gw * dim;
        tn_image_free(&out);
    }
    ci->mm = (tn_mm_batch){.n_images = ci->n, .grid_thw = ci->grid, .row = ci->row, .pixel_values = ci->pix,
                           .patch_dim = (int)dim};
    return 0;
}

/* The text with one <image> tag per image (a text without tags gets them in front, as LLaMA-Factory's chat does);
 * NULL + tn_err when it holds tags that do not pair up with the images. */
static char *with_image_tags(const char *text, const chat_images *ci) {
    static const char tag[] = "<image>";
    int tags = 0;
    for (const char *q = strstr(text, tag); q; q = strstr(q + 1, tag)) tags++;
    if (tags && tags != ci->n) {
        tn_err("the prompt has %d <image> tags but %d --image files were given", tags, ci->n);
        return NULL;
    }
    char *out = tn_xmalloc(strlen(text) + (size_t)(tags ? 0 : ci->n) * (sizeof tag - 1) + 1);
    out[0] = 0;
    for (int i = 0; !tags && i < ci->n; i++) strcat(out, tag);
    strcat(out, text);
    return out;
}

typedef struct {
    int prompt_tokens, new_tokens, reused;
    double t_start, t_first, t_end;
} answer_stats;

/* piece holds something a reader sees (not only white space). */
static int printable(const char *piece) {
    for (const unsigned char *p = (const unsigned char *)piece; *p; p++)
        if (!isspace(*p)) return 1;
    return 0;
}

/* Seconds of generation that show nothing (white space, tokens that print nothing, a long prefill) get a line on
 * stderr every few seconds saying that it runs and how far it is (quiet_watch.h). */
static void progress_line(tn_quiet *q, const answer_stats *st, int n_new, int shown, int max_new) {
    double now = tn_now(), quiet_s = tn_quiet_for(q, now);
    if (tn_quiet_tick(q, now, shown))
        fprintf(stderr, "tandem: generating: %d of at most %d new tokens (max_new_tokens) in %.0f s, %.1f tokens/s; "
                        "nothing printable for %.0f s\n", n_new, max_new, now - st->t_start,
                n_new / (now - st->t_start), quiet_s);
}

/* Streams the answer to turns[0..n) to out (when not NULL); returns the whole text (malloc'd) or NULL + tn_err. */
/* ci: the conversation's images (their tags are in turns[0]); mm: the images to prefill (NULL: already cached) */
static char *answer(tn_infer *s, tn_gen *g, const char *const *turns, int n, uint64_t seed, FILE *out,
                    answer_stats *st, const chat_images *ci, const tn_mm_batch *mm) {
    tn_ids prompt = {0};
    memset(st, 0, sizeof *st);
    st->t_start = tn_now();
    if (tn_infer_prompt_mm(s, NULL, turns, n, ci->tokens, ci->n, &prompt) != 0) return NULL;
    tn_sampling sp = tn_infer_sampling(s, seed);
    int rc = tn_gen_set_images(g, 0, mm);
    if (rc == 0) rc = tn_gen_start(g, 0, prompt.ids, (int)prompt.n, &sp, s->stop, s->n_stop);
    if (rc != 0) tn_err("%s: say \"clear\" to start a new conversation", tn_errmsg());
    st->prompt_tokens = (int)prompt.n, st->reused = rc == 0 ? tn_gen_reused(g, 0) : 0;
    tn_ids_free(&prompt);
    if (rc != 0) return NULL;
    tn_text_stream ts = {0};
    size_t len = 0;
    char *text = tn_xstrdup("");
    tn_quiet quiet;
    tn_quiet_start(&quiet, 0, st->t_start);
    for (tn_gen_event ev; (rc = tn_gen_step(g, &ev)) > 0;) {
        if (ev.prefilled) st->t_first = tn_now();
        int k;
        const int32_t *ids = tn_gen_output(g, 0, &k);
        char *piece = tn_text_next(&ts, s->tok, ids, k, ev.finish != TN_FINISH_NONE);
        size_t pl = strlen(piece);
        text = tn_xrealloc(text, len + pl + 1);
        memcpy(text + len, piece, pl + 1);
        len += pl;
        if (out && pl) fputs(piece, out), fflush(out);
        progress_line(&quiet, st, k, printable(piece), s->cfg->max_new_tokens);
        free(piece);
    }
    st->t_end = tn_now();
    tn_gen_output(g, 0, &st->new_tokens);
    if (rc < 0) {
        free(text);
        return NULL;
    }
    return text;
}

static int load_cfg(int argc, char **argv, tn_train_config *cfg, const char **prompt, int *stats, chat_images *ci) {
    if (argc < 1 || strchr(argv[0], '=')) return tn_err("expected a config file first: CONFIG.yaml [key=value ...]");
    int rc = tn_train_config_load(argv[0], cfg);
    for (int i = 1; i < argc && rc == 0; i++) {
        if (prompt && strcmp(argv[i], "--prompt") == 0 && i + 1 < argc) *prompt = argv[++i];
        else if (strcmp(argv[i], "--image") == 0 && i + 1 < argc) {
            if (ci->n == MAX_IMAGES) rc = tn_err("--image: at most %d images", MAX_IMAGES);
            else ci->file[ci->n++] = argv[++i];
        }
        else if (stats && strcmp(argv[i], "--stats") == 0) *stats = 1;
        else if (!strchr(argv[i], '=')) rc = tn_err("command line: '%s' is not key=value", argv[i]);
        else rc = tn_train_config_override(cfg, argv[i]);
    }
    if (rc == 0) rc = tn_train_config_finish(cfg);
    if (rc == 0) rc = tn_train_config_check_model_paths(cfg);
    if (rc == 0) tn_train_config_print_notices(cfg, stderr); /* stdout: the answer */
    return rc;
}

static tn_gen *open_gen(tn_infer *s) {
    int ctx = tn_infer_context(s, 0);
    return tn_gen_create(s->m, 1, ctx);
}

int tn_cmd_generate(int argc, char **argv) {
    static tn_train_config cfg;
    const char *prompt = NULL;
    int stats = 0;
    tn_infer s = {0};
    tn_gen *g = NULL;
    static chat_images ci;
    char *expanded = NULL;
    int rc = load_cfg(argc, argv, &cfg, &prompt, &stats, &ci);
    if (rc == 0 && !prompt) rc = tn_err("generate needs --prompt TEXT");
    if (rc == 0 && !printable(prompt)) rc = tn_err("generate: --prompt is empty: give the text the model answers");
    if (rc == 0) rc = tn_infer_open(&s, &cfg, 1);
    if (rc == 0) rc = prepare_images(&cfg, s.m, &ci);
    if (rc == 0 && ci.n && !(expanded = with_image_tags(prompt, &ci))) rc = -1;
    if (expanded) prompt = expanded;
    if (rc == 0 && !(g = open_gen(&s))) rc = -1;
    answer_stats st;
    char *text = rc == 0 ? answer(&s, g, &prompt, 1, (uint64_t)cfg.seed, stdout, &st, &ci, ci.n ? &ci.mm : NULL) : NULL;
    if (text) {
        printf("\n");
        fflush(stdout);
        if (stats) {
            double ttft = st.t_first - st.t_start, decode = st.t_end - st.t_first;
            fprintf(stderr, "tandem: %d prompt tokens, %d new tokens: time to first token %.1f ms, then %.1f tokens/s "
                            "(%.1f tokens/s overall, %s, %d threads)\n",
                    st.prompt_tokens, st.new_tokens, 1e3 * ttft,
                    st.new_tokens > 1 && decode > 0 ? (st.new_tokens - 1) / decode : 0.0,
                    st.new_tokens / (st.t_end - st.t_start), s.m->be->describe(), s.m->be->num_threads());
        }
    } else {
        rc = -1;
    }
    free(text), free(expanded), free(ci.pix);
    tn_gen_free(g);
    tn_infer_close(&s);
    if (rc) fprintf(stderr, "tandem: error: %s\n", tn_errmsg());
    return rc ? 1 : 0;
}

int tn_cmd_chat(int argc, char **argv) {
    static tn_train_config cfg;
    tn_infer s = {0};
    tn_gen *g = NULL;
    static chat_images ci;
    int rc = load_cfg(argc, argv, &cfg, NULL, NULL, &ci);
    if (rc == 0) rc = tn_infer_open(&s, &cfg, 1);
    if (rc == 0) rc = prepare_images(&cfg, s.m, &ci);
    if (rc == 0 && !(g = open_gen(&s))) rc = -1;
    if (rc) {
        fprintf(stderr, "tandem: error: %s\n", tn_errmsg());
        tn_infer_close(&s);
        return 1;
    }
    printf("tandem chat: %s%s%s, template %s. \"clear\" starts over, \"exit\" leaves.\n", cfg.model_name_or_path,
           cfg.adapter_name_or_path[0] ? " + " : "", cfg.adapter_name_or_path, cfg.template_name);
    char **turns = NULL;
    int n = 0;
    char line[8192];
    uint64_t seed = (uint64_t)cfg.seed ^ (uint64_t)time(NULL);
    for (;;) {
        printf("\nUser: ");
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin)) break;
        line[strcspn(line, "\r\n")] = 0;
        if (!strcmp(line, "exit")) break;
        if (!strcmp(line, "clear")) {
            for (int i = 0; i < n; i++) free(turns[i]);
            n = 0;
            printf("History has been removed.\n");
            continue;
        }
        if (!printable(line)) { /* refused in a line, as generate does: an empty turn says nothing to answer */
            printf("(an empty message: type one, \"clear\" or \"exit\")\n");
            continue;
        }
        turns = tn_xrealloc(turns, (size_t)(n + 2) * sizeof *turns);
        int with_images = n == 0 && ci.n; /* the --image files go with the conversation's first turn */
        turns[n] = with_images ? with_image_tags(line, &ci) : tn_xstrdup(line);
        if (!turns[n]) {
            fprintf(stderr, "tandem: error: %s\n", tn_errmsg());
            continue;
        }
        n++;
        printf("Assistant: ");
        fflush(stdout);
        answer_stats st;
        char *text = answer(&s, g, (const char *const *)turns, n, seed++, stdout, &st, &ci, with_images ? &ci.mm : NULL);
        printf("\n");
        if (!text) {
            fprintf(stderr, "tandem: error: %s\n", tn_errmsg());
            free(turns[--n]);
            continue;
        }
        turns[n++] = text;
    }
    for (int i = 0; i < n; i++) free(turns[i]);
    free(turns), free(ci.pix);
    tn_gen_free(g);
    tn_infer_close(&s);
    return 0;
}
