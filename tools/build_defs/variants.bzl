"""Kernel variants built on request: --define=mlaps_sm90_<flag>=1 passes -DMLAPS_SM90_<FLAG>=1.

nvcc does not see --copt, so a variant reaches a CUDA build as a --define that a config_setting
turns into copts; tools/gpu_bundle.sh --variant stages such builds beside the default one.
"""

def sm90_variant_copts(flags):
    """Declares a config_setting `sm90_<flag>` per flag and returns the copts they select.

    Args:
      flags: variant names (lower case, each once); an empty list declares nothing and returns
        []. Call it once a package: a second call would declare its config_settings again.

    Returns:
      A copts value: -DMLAPS_SM90_<FLAG>=1 for each flag whose --define is set.
    """
    copts = []
    for flag in flags:
        native.config_setting(
            name = "sm90_" + flag,
            define_values = {"mlaps_sm90_" + flag: "1"},
        )
        copts += select({
            ":sm90_" + flag: ["-DMLAPS_SM90_" + flag.upper() + "=1"],
            "//conditions:default": [],
        })
    return copts
