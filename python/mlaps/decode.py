"""GPU layer (filled in below)."""


def cuda_available():
    return False


def decode_status(*a, **k):
    raise NotImplementedError


def get_mla_decode_workspace_info(*a, **k):
    raise NotImplementedError


def mla_decode_fwd(*a, **k):
    raise NotImplementedError


def sparse_gather(*a, **k):
    raise NotImplementedError


def cp_lse_merge(*a, **k):
    raise NotImplementedError
