python3 -m flexgen.flex_opt \
  --model facebook/opt-175b \
  --path '~/opt_weights' \
  --offload-dir '~/flexgen_offload_dir' \
  --prompt-len 512 \
  --gen-len 32 \
  --percent 2 37 0 0 0 0 \
  --gpu-batch-size 56 \
  --num-gpu-batches 12
