/* lf_tools.c -- tool use as LLaMA-Factory renders it (tool_utils.py, formatter.py): the tool list of an
 * example becomes text appended to the system prompt, and a function_call message (JSON of one call
 * {"name", "arguments"} or a list of them) becomes the assistant text of the template's tool format.
 * JSON is re-serialised as Python's json.dumps(ensure_ascii=False) does.
 *
 * Formats: default (default template), qwen (qwen, qwen3, qwen3_nothink), llama3 (llama3; its tool prompt
 * holds today's date, as LF's datetime.now(), so such data is keyed by date in the cache). Input LF
 * would crash on (invalid JSON, a call without name/arguments, a tool without parameters.properties for
 * the default format) is refused naming the file and record. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/lf_internal.h"

static const char k_qwen_prompt_head[] =
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
static const char k_qwen_prompt_tail[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
    "</tool_call>";
static const char k_llama3_prompt_a[] = "Cutting Knowledge Date: December 2023\nToday Date: ";
static const char k_llama3_prompt_b[] =
    "\n\nYou have access to the following functions. To call a function, please respond with JSON for a function "
    "call. Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}. "
    "Do not use variables.\n\n";
static const char k_default_prompt_a[] = "You have access to the following tools:\n";
static const char k_default_prompt_b[] =
    "Use the following format if using a tool:\n```\nAction: tool name (one of [";
static const char k_default_prompt_c[] =
    "])\nAction Input: the input to the tool, in a JSON format representing the kwargs "
    "(e.g. ```{\"input\": \"hello world\", \"num_beams\": 5}```)\n```\n";

static int bad(const lf_example *e, const char *what, const char *msg) {
    return tn_err("%s: record %d: %s: %s", e->file, e->rec, what, msg);
}

/* {"k1": v1, "k2": v2} as a temporary object (members copied, children shared). */
static lj_val *pair_obj(lf_arena *a, const char *k1, const lj_val *v1, const char *k2, const lj_val *v2) {
    lj_val *o = lf_alloc(a, sizeof *o), *m1 = lf_alloc(a, sizeof *m1), *m2 = lf_alloc(a, sizeof *m2);
    *m1 = *v1, *m2 = *v2;
    m1->key = k1, m1->klen = (uint32_t)strlen(k1), m1->next = m2;
    m2->key = k2, m2->klen = (uint32_t)strlen(k2), m2->next = NULL;
    o->type = LJ_OBJ, o->n = 2, o->child = m1;
    return o;
}

static lj_val *str_val(lf_arena *a, const char *s) {
    lj_val *v = lf_alloc(a, sizeof *v);
    v->type = LJ_STR, v->s = s, v->n = (uint32_t)strlen(s);
    return v;
}

/* tool if tool["type"] == "function" else {"type": "function", "function": tool} */
static const lj_val *wrap_function(lf_arena *a, const lj_val *tool) {
    if (lj_streq(lj_get(tool, "type"), "function")) return tool;
    return pair_obj(a, "type", str_val(a, "function"), "function", tool);
}

/* Members of a dict in Python order: first occurrence of each key, last value. */
static int first_of_key(const lj_val *obj, const lj_val *m) {
    for (const lj_val *o = obj->child; o != m; o = o->next)
        if (o->klen == m->klen && memcmp(o->key, m->key, m->klen) == 0) return 0;
    return 1;
}

/* Python's `not value` (absent counts as falsy). */
static int falsy(const lj_val *v) {
    if (!v) return 1;
    switch (v->type) {
    case LJ_NULL:
    case LJ_FALSE: return 1;
    case LJ_NUM: return strtod(v->s, NULL) == 0;
    case LJ_STR:
    case LJ_ARR:
    case LJ_OBJ: return v->n == 0;
    default: return 0;
    }
}

/* str(value) for format(); only scalars are supported. */
static int pystr(const lf_example *e, const char *what, const lj_val *v, lf_buf *out) {
    if (!v) return 0;
    if (lj_pystr(v, out) != 0) return bad(e, what, "must be a string or number for the default template's tool prompt");
    return 0;
}

static int default_tools(const lf_example *e, const lj_val *tools, lf_buf *out) {
    lf_buf text = {0}, names = {0};
    int rc = 0, i = 0;
    for (const lj_val *tool = tools->child; tool && rc == 0; tool = tool->next, i++) {
        if (lj_streq(lj_get(tool, "type"), "function")) tool = lj_get(tool, "function");
        const lj_val *params = tool && tool->type == LJ_OBJ ? lj_get(tool, "parameters") : NULL;
        const lj_val *props = params && params->type == LJ_OBJ ? lj_get(params, "properties") : NULL;
        const lj_val *name = tool && tool->type == LJ_OBJ ? lj_get(tool, "name") : NULL;
        if (!props || props->type != LJ_OBJ) {
            rc = bad(e, "tools", "each tool needs parameters.properties (an object) for the default template");
            break;
        }
        if (!name || name->type != LJ_STR) {
            rc = bad(e, "tools", "each tool needs a string 'name'");
            break;
        }
        const lj_val *req = lj_get(params, "required");
        lf_buf params_text = {0};
        for (const lj_val *p = props->child; p && rc == 0; p = p->next) {
            if (!first_of_key(props, p)) continue;
            const lj_val *param = lj_get(props, p->key);
            if (param->type != LJ_OBJ) {
                rc = bad(e, "tools", "each parameter in properties must be an object");
                break;
            }
            int required = 0;
            if (req && req->type == LJ_ARR) {
                for (const lj_val *r = req->child; r; r = r->next)
                    if (r->type == LJ_STR && r->n == p->klen && memcmp(r->s, p->key, p->klen) == 0) required = 1;
            } else if (req && req->type == LJ_STR) {  /* Python's `in` on a string: a substring test */
                for (uint32_t k = 0; k + p->klen <= req->n && !required; k++)
                    required = memcmp(req->s + k, p->key, p->klen) == 0;
            } else if (req && req->type != LJ_NULL) {
                rc = bad(e, "tools", "parameters.required must be a list of names");
                break;
            }
            lf_buf_puts(&params_text, "  - ");
            lf_buf_put(&params_text, p->key, p->klen);
            lf_buf_puts(&params_text, " (");
            if (pystr(e, "tools: a parameter's type", lj_get(param, "type"), &params_text) != 0) rc = -1;
            if (required) lf_buf_puts(&params_text, ", required");
            lf_buf_puts(&params_text, "): ");
            if (rc == 0 && pystr(e, "tools: a parameter's description", lj_get(param, "description"), &params_text) != 0)
                rc = -1;
            const lj_val *en = lj_get(param, "enum");
            if (rc == 0 && en && en->type == LJ_ARR && en->n) {
                lf_buf_puts(&params_text, ", should be one of [");
                for (const lj_val *x = en->child; x && rc == 0; x = x->next) {
                    if (x->type != LJ_STR) rc = bad(e, "tools", "enum values must be strings (\", \".join)");
                    else lf_buf_put(&params_text, x->s, x->n);
                    if (x->next) lf_buf_puts(&params_text, ", ");
                }
                lf_buf_putc(&params_text, ']');
            } else if (rc == 0 && !falsy(en)) {
                rc = bad(e, "tools", "enum must be a list of strings");
            }
            const lj_val *items = lj_get(param, "items");
            if (rc == 0 && items && items->type == LJ_OBJ && items->n) {
                lf_buf_puts(&params_text, ", where each item should be ");
                rc = pystr(e, "tools: items.type", lj_get(items, "type"), &params_text);
            } else if (rc == 0 && !falsy(items) && items->type != LJ_OBJ) {
                rc = bad(e, "tools", "items must be an object");
            }
            lf_buf_putc(&params_text, '\n');
        }
        if (rc == 0) {
            lf_buf_puts(&text, "> Tool Name: ");
            lf_buf_put(&text, name->s, name->n);
            lf_buf_puts(&text, "\nTool Description: ");
            rc = pystr(e, "tools: description", lj_get(tool, "description"), &text);
            lf_buf_puts(&text, "\nTool Args:\n");
            if (params_text.n) lf_buf_put(&text, params_text.p, params_text.n);
            lf_buf_putc(&text, '\n');
            if (i) lf_buf_puts(&names, ", ");
            lf_buf_put(&names, name->s, name->n);
        }
        free(params_text.p);
    }
    if (rc == 0) {
        lf_buf_puts(out, k_default_prompt_a);
        if (text.n) lf_buf_put(out, text.p, text.n);
        lf_buf_puts(out, k_default_prompt_b);
        if (names.n) lf_buf_put(out, names.p, names.n);
        lf_buf_puts(out, k_default_prompt_c);
    }
    free(text.p), free(names.p);
    return rc;
}

int lf_tools_prompt(const lf_template *t, const char *json, size_t n, lf_buf *out, const lf_example *e) {
    lf_arena a = {0};
    lj_error err;
    const lj_val *tools = lj_parse(&a, json, n, &err);
    int rc = 0;
    if (!tools) {
        char msg[200];
        snprintf(msg, sizeof msg, "not valid JSON at byte %zu: %s", err.off, err.msg);
        rc = bad(e, "tools", msg);
    } else if (tools->type != LJ_ARR) {
        rc = bad(e, "tools", "must be a JSON list of tool descriptions");
    } else {
        for (const lj_val *x = tools->child; x && rc == 0; x = x->next)
            if (x->type != LJ_OBJ) rc = bad(e, "tools", "each tool must be a JSON object");
    }
    if (rc == 0 && tools->n > 0) {
        switch (t->def->tool_format) {
        case LF_TOOLS_DEFAULT: rc = default_tools(e, tools, out); break;
        case LF_TOOLS_QWEN:
            lf_buf_puts(out, k_qwen_prompt_head);
            for (const lj_val *x = tools->child; x; x = x->next) {
                lf_buf_putc(out, '\n');
                lj_dump(wrap_function(&a, x), -1, out);
            }
            lf_buf_puts(out, k_qwen_prompt_tail);
            break;
        case LF_TOOLS_LLAMA3:
            lf_buf_puts(out, k_llama3_prompt_a);
            lf_buf_puts(out, t->date);
            lf_buf_puts(out, k_llama3_prompt_b);
            for (const lj_val *x = tools->child; x; x = x->next) {
                lj_dump(wrap_function(&a, x), 4, out);
                lf_buf_puts(out, "\n\n");
            }
            break;
        }
    }
    lf_arena_free(&a);
    return rc;
}

int lf_function_text(const lf_template *t, const char *content, size_t n, lf_buf *out, const lf_example *e) {
    /* a thought "<think>\n...\n</think>\n\n" is cut out (every copy of it) and put in front */
    static const char tw0[] = "<think>\n", tw1[] = "\n</think>\n\n";
    const char *th = NULL;
    size_t thn = 0;
    for (size_t i = 0; i + 8 <= n && !th; i++) {
        if (memcmp(content + i, tw0, 8) != 0) continue;
        for (size_t j = i + 8; j + 11 <= n; j++)
            if (memcmp(content + j, tw1, 11) == 0) {
                th = content + i, thn = j + 11 - i;
                break;
            }
        if (!th) break;  /* no closing word after the first opening one: none after later ones either */
    }
    lf_buf body = {0};
    if (th) {
        for (size_t i = 0; i < n;) {
            if (i + thn <= n && memcmp(content + i, th, thn) == 0) i += thn;
            else lf_buf_putc(&body, content[i++]);
        }
    } else {
        lf_buf_put(&body, content, n);
    }
    lf_arena a = {0};
    lj_error err;
    const lj_val *calls = lj_parse(&a, body.p ? body.p : "", body.n, &err);
    int rc = 0;
    if (!calls) {
        char msg[200];
        snprintf(msg, sizeof msg, "not valid JSON at byte %zu: %s", err.off, err.msg);
        rc = bad(e, "function_call message", msg);
    }
    lj_val one;
    if (rc == 0 && calls->type != LJ_ARR) {  /* a single call */
        one = (lj_val){.type = LJ_ARR, .n = 1, .child = lf_alloc(&a, sizeof(lj_val))};
        *one.child = *calls;
        one.child->next = NULL, one.child->key = NULL;
        calls = &one;
    }
    for (const lj_val *c = rc == 0 ? calls->child : NULL; c && rc == 0; c = c->next)
        if (c->type != LJ_OBJ || !lj_get(c, "name") || !lj_get(c, "arguments"))
            rc = bad(e, "function_call message", "each call must be an object with \"name\" and \"arguments\"");
    if (th) lf_buf_put(out, th, thn);
    int fmt = t->def->tool_format;
    if (rc == 0 && fmt == LF_TOOLS_LLAMA3) {  /* {"name", "parameters"}, a list only for several calls */
        lj_val *list = lf_alloc(&a, sizeof *list);
        list->type = LJ_ARR;
        lj_val **tail = &list->child;
        for (const lj_val *c = calls->child; c; c = c->next) {
            lj_val *o = pair_obj(&a, "name", lj_get(c, "name"), "parameters", lj_get(c, "arguments"));
            *tail = o, tail = &o->next;
            list->n++;
        }
        lj_dump(list->n == 1 ? list->child : list, -1, out);
    }
    for (const lj_val *c = rc == 0 && fmt != LF_TOOLS_LLAMA3 ? calls->child : NULL; c && rc == 0; c = c->next) {
        const lj_val *name = lj_get(c, "name"), *args = lj_get(c, "arguments");
        if (c != calls->child) lf_buf_putc(out, '\n');
        if (fmt == LF_TOOLS_QWEN) {
            lf_buf_puts(out, "<tool_call>\n");
            lj_dump(pair_obj(&a, "name", name, "arguments", args), -1, out);
            lf_buf_puts(out, "\n</tool_call>");
        } else {  /* default: Action / Action Input */
            lf_buf_puts(out, "Action: ");
            if (lj_pystr(name, out) != 0) rc = bad(e, "function_call message", "the call's name must be a string");
            lf_buf_puts(out, "\nAction Input: ");
            lj_dump(args, -1, out);
        }
    }
    lf_arena_free(&a);
    free(body.p);
    return rc;
}
