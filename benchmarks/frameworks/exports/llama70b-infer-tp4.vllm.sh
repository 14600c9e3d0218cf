vllm serve meta-llama/Llama-3.1-70B \
  --tensor-parallel-size 2 \
  --pipeline-parallel-size 4 \
  --max-num-seqs 621 \
  --max-num-batched-tokens 8192 \
  --max-model-len 2304 \
  --gpu-memory-utilization 0.9 \
  --kv-cache-dtype auto \
  --block-size 16 \
  --dtype bfloat16
