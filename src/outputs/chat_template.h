/* chat_template -- the chat template next to a trained model, as LLaMA-Factory's tokenizer.save_pretrained
 * leaves it with current transformers: chat_template.jinja beside tokenizer_config.json. */
#ifndef TN_CHAT_TEMPLATE_H
#define TN_CHAT_TEMPLATE_H

/* Writes OUT_DIR/chat_template.jinja (atomically) from MODEL_DIR's tokenizer_config.json "chat_template"
 * string when MODEL_DIR has no chat_template.jinja of its own (that one is copied with the tokenizer files).
 * 1 written, 0 nothing to write (no template in MODEL_DIR), -1 with tn_err. */
int tn_write_chat_template(const char *model_dir, const char *out_dir);

#endif
