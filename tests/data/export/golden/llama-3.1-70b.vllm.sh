vllm serve meta-llama/Llama-3.1-70B-Instruct \
  --tensor-parallel-size 4 \
  --pipeline-parallel-size 1 \
  --data-parallel-size 2 \
  --max-num-seqs 96 \
  --max-model-len 2560 \
  --gpu-memory-utilization 0.9 \
  --kv-cache-dtype auto \
  --block-size 16 \
  --dtype bfloat16
