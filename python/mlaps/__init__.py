"""mlaps: plan, check, simulate and run MLA decode (DeepSeek multi-head latent attention)
with persistent scheduling, from Python.

AITER-shaped entry points (same argument names and order; switch by changing the import):
    get_mla_metadata_info_v1, get_mla_metadata_v1, mla_decode_fwd
mlaps only:
    check_plan (every violated plan invariant), simulate (CPU executor vs fp64 reference),
    read_metadata, resolve_variant, default_fixed_overhead, kv_lanes,
    get_mla_decode_workspace_info, decode_status
The planner, checker and simulator run on any CPU (libmlaps_c.so over ctypes + numpy); the
decode, the GPU planner, the sparse gather and the CP merge need libmlaps_cuda.so (NVIDIA
build) and take device arrays through __cuda_array_interface__ (torch CUDA tensors work; the
package does not import torch).
"""

from .planner import (get_mla_metadata_info_v1, get_mla_metadata_v1, read_metadata,
                      resolve_variant, default_fixed_overhead, kv_lanes)
from .check import Violation, SimResult, check_plan, simulate
from .decode import (cuda_available, decode_status, get_mla_decode_workspace_info,
                     mla_decode_fwd, sparse_gather, cp_lse_merge)

__version__ = "0.1.0"

__all__ = [
    "get_mla_metadata_info_v1", "get_mla_metadata_v1", "read_metadata", "resolve_variant",
    "default_fixed_overhead", "kv_lanes",
    "Violation", "SimResult", "check_plan", "simulate", "cuda_available", "decode_status",
    "get_mla_decode_workspace_info", "mla_decode_fwd", "sparse_gather", "cp_lse_merge",
]
