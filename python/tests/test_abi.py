"""The ctypes mirrors of python/native/mlaps_c.h's structs have the C layout's size (a field
added, dropped or retyped on one side only changes it), checked against the library's sizeof."""
import ctypes

import pytest

from mlaps import _native, decode

MIRRORS = {
    "mlaps_batch": _native.Batch,
    "mlaps_plan_options": _native.PlanOptions,
    "mlaps_plan_buffers": _native.PlanBuffers,
    "mlaps_plan_sizes": _native.PlanSizes,
    "mlaps_capacity_query": _native.CapacityQuery,
    "mlaps_capacity": _native.Capacity,
    "mlaps_variant_query": _native.VariantQuery,
    "mlaps_variant": _native.Variant,
    "mlaps_check_options": _native.CheckOptions,
    "mlaps_sim_inputs": _native.SimInputs,
    "mlaps_sim_result": _native.SimResult,
    "mlaps_gpu_plan_args": decode._GpuPlanArgs,
    "mlaps_decode_args": decode._DecodeArgs,
    "mlaps_sparse_gather_args": decode._SparseGatherArgs,
    "mlaps_lse_merge_args": decode._LseMergeArgs,
}


def c_size(name):
    out = _native._i64()
    err = _native.Error()
    _native.raise_for(_native.cpu().mlaps_struct_size(name.encode(), ctypes.byref(out), err.buf,
                                                      err.size), err, "mlaps_struct_size")
    return out.value


@pytest.mark.parametrize("name", sorted(MIRRORS))
def test_mirror_has_the_c_size(name):
    assert ctypes.sizeof(MIRRORS[name]) == c_size(name), name


def test_unknown_struct_is_an_error():
    with pytest.raises(ValueError, match="no struct 'mlaps_nothing'"):
        c_size("mlaps_nothing")
