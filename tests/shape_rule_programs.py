"""StableHLO programs for the shape rules that need a launcher check (data shared by
test_plan_check.py and test_bad_input.py)."""

# Programs whose kernels read out of bounds when the inputs' dims disagree unless the op's shape
# rule adds a launcher check (the plan checker found each one missing).
# tests/test_bad_input.py runs each with agreeing and disagreeing dims.
SHAPE_RULE_PROGRAMS = {
    "clamp_bounds": """
func.func @main(%lo: tensor<?xf32>, %x: tensor<?xf32>, %hi: tensor<?xf32>) -> tensor<?xf32> {
  %0 = stablehlo.clamp %lo, %x, %hi : tensor<?xf32>
  return %0 : tensor<?xf32>
}""",
    "select_predicate": """
func.func @main(%p: tensor<?xi1>, %a: tensor<?xf32>, %b: tensor<?xf32>) -> tensor<?xf32> {
  %0 = stablehlo.select %p, %a, %b : tensor<?xi1>, tensor<?xf32>
  return %0 : tensor<?xf32>
}""",
    "reshape_to_static": """
func.func @main(%x: tensor<?xf32>) -> tensor<2x3xf32> {
  %0 = stablehlo.reshape %x : (tensor<?xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}""",
    "gather_batching_dims": """
func.func @main(%x: tensor<?x?x3xf32>, %i: tensor<?x1xi32>) -> tensor<?x3xf32> {
  %0 = "stablehlo.gather"(%x, %i) <{dimension_numbers = #stablehlo.gather<offset_dims = [1],
    collapsed_slice_dims = [1], operand_batching_dims = [0], start_indices_batching_dims = [0],
    start_index_map = [1], index_vector_dim = 1>, slice_sizes = array<i64: 1, 1, 3>}>
    : (tensor<?x?x3xf32>, tensor<?x1xi32>) -> tensor<?x3xf32>
  return %0 : tensor<?x3xf32>
}""",
    "gather_index_vector": """
func.func @main(%x: tensor<?x?xf32>, %i: tensor<?x?xi32>) -> tensor<?x1x1xf32> {
  %0 = "stablehlo.gather"(%x, %i) <{dimension_numbers = #stablehlo.gather<offset_dims = [1, 2],
    start_index_map = [0, 1], index_vector_dim = 1>, slice_sizes = array<i64: 1, 1>}>
    : (tensor<?x?xf32>, tensor<?x?xi32>) -> tensor<?x1x1xf32>
  return %0 : tensor<?x1x1xf32>
}""",
    "conv_batch_groups": """
func.func @main(%x: tensor<?x?x?x?xf32>, %k: tensor<?x?x?x?xf32>) -> tensor<?x?x?x?xf32> {
  %0 = stablehlo.convolution(%x, %k) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f],
    window = {stride = [1, 1]} {batch_group_count = 4 : i64, feature_group_count = 1 : i64}
    : (tensor<?x?x?x?xf32>, tensor<?x?x?x?xf32>) -> tensor<?x?x?x?xf32>
  return %0 : tensor<?x?x?x?xf32>
}""",
}
