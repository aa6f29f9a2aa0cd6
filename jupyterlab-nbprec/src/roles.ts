/**
 * Which of two dumps is the target and which the benchmark, guessed from their names.
 */

/** Name words that say "reference run". */
const BENCHMARK_WORDS = new Set([
  'fp32', 'float32', 'fp64', 'float64', 'f32', 'bench', 'benchmark', 'golden', 'baseline', 'ref', 'reference',
  'cpu', 'gpu', 'cuda', 'tf', 'tensorflow'
]);
/** Name words that say "low precision or accelerator run". */
const TARGET_WORDS = new Set([
  'fp16', 'float16', 'bf16', 'bfloat16', 'half', 'amp', 'autocast', 'fp8', 'int8', 'npu', 'ascend', 'target'
]);

function has(name: string, words: Set<string>): boolean {
  return name
    .toLowerCase()
    .split(/[^a-z0-9]+/)
    .some(word => words.has(word));
}

/**
 * `[target, benchmark]` for the dumps named `a` and `b`: the one whose name says float32, CPU, GPU,
 * benchmark, ... is the benchmark, else the one whose name says float16, bfloat16, NPU, ... is the target,
 * else the order given (the file browser's order).
 */
export function orderPair(a: string, b: string): [string, string] {
  if (has(a, BENCHMARK_WORDS) !== has(b, BENCHMARK_WORDS)) {
    return has(a, BENCHMARK_WORDS) ? [b, a] : [a, b];
  }
  if (has(a, TARGET_WORDS) !== has(b, TARGET_WORDS)) {
    return has(a, TARGET_WORDS) ? [a, b] : [b, a];
  }
  return [a, b];
}
