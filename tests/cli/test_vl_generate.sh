#!/bin/sh
# `tandem generate` / `tandem chat` with `--image FILE` on the tiny VL models (examples/tiny-qwen2-vl, tiny-qwen3-vl
# made by init-model with the real Qwen tokenizer, random weights: the checks are about the plumbing):
#  - the prompt grows by exactly the image's tokens (<|vision_start|> + t*h*w/4 <|image_pad|> + <|vision_end|>: 6 + 2
#    for a 60x90 image at Qwen2-VL's 14-pixel patches, 70 + 2 at Qwen3-VL's 16 and min_pixels 65536), with the
#    <image> tag written or left out (then put in front, as LLaMA-Factory's chat does);
#  - <image> tags that do not pair up with the files, and --image on a text model, fail in one line;
#  - chat takes the image with its first turn and answers a second turn from the cache.
# (The KV-cache path with images is checked against the full forward in tests/unit/test_unit_vl_tiny.c.)
set -u
. "${TANDEM_TESTS_DIR:?}/cli/testlib.sh"
BIN=${TANDEM_BIN:?}
ROOT=$TANDEM_TESTS_DIR/..
need_shared test_vl_generate
IMG=$SHARED/ref/fixtures/qwen2vl-f32/images/image0.png
T=$(mktemp -d /tmp/tandem-vlgen-XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
fails=0 checks=0
tokens() { sed -n 's/.*tandem: \([0-9]*\) prompt tokens.*/\1/p' "$1"; }
for ex in tiny-qwen2-vl:8 tiny-qwen3-vl:72 tiny-qwen3:0; do
  name=${ex%%:*} extra=${ex##*:}
  "$BIN" init-model "$ROOT/examples/$name/config.json" "$T/$name" --tokenizer "$SHARED/data/tokenizers/qwen3" >/dev/null 2>&1
  tpl=qwen2_vl; [ "$name" = tiny-qwen3-vl ] && tpl=qwen3_vl; [ "$name" = tiny-qwen3 ] && tpl=qwen3
  printf 'model_name_or_path: %s\ntemplate: %s\nmax_new_tokens: 4\ndo_sample: false\n' "$T/$name" "$tpl" >"$T/$name.yaml"
  if [ "$extra" = 0 ]; then # a text model refuses images in one line
    "$BIN" generate "$T/$name.yaml" --prompt "hi" --image "$IMG" >"$T/out" 2>"$T/err"
    rc=$?
    check '[ $rc -ne 0 ] && [ $(wc -l <"$T/err") -eq 1 ] && grep -q "takes no images" "$T/err"'
    continue
  fi
  "$BIN" generate "$T/$name.yaml" --prompt "What is in the picture?" --stats >"$T/out0" 2>"$T/err0"
  rc=$?
  check '[ $rc -eq 0 ]'
  "$BIN" generate "$T/$name.yaml" --prompt "<image>What is in the picture?" --image "$IMG" --stats >"$T/out1" 2>"$T/err1"
  rc=$?
  check '[ $rc -eq 0 ] && [ $(tokens "$T/err1") -eq $(($(tokens "$T/err0") + extra)) ]'
  "$BIN" generate "$T/$name.yaml" --prompt "What is in the picture?" --image "$IMG" --stats >"$T/out2" 2>"$T/err2"
  rc=$?
  check '[ $rc -eq 0 ] && [ $(tokens "$T/err2") -eq $(tokens "$T/err1") ] && cmp -s "$T/out1" "$T/out2"'
  "$BIN" generate "$T/$name.yaml" --prompt "<image><image>Two?" --image "$IMG" >"$T/out" 2>"$T/err"
  rc=$?
  check '[ $rc -ne 0 ] && [ $(wc -l <"$T/err") -eq 1 ] && grep -q "2 <image> tags but 1 --image" "$T/err"'
  printf 'What is this?\nAnd now?\nexit\n' | "$BIN" chat "$T/$name.yaml" --image "$IMG" >"$T/chat" 2>"$T/chaterr"
  rc=$?
  check '[ $rc -eq 0 ] && [ $(grep -c "Assistant:" "$T/chat") -eq 2 ] && ! grep -q "error" "$T/chaterr"'
done
[ "$fails" -eq 0 ] || for f in "$T"/err* "$T/chaterr"; do echo "== $f"; tail -n 3 "$f"; done
echo "test_vl_generate: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
