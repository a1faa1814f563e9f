"""Calibration: turn measurements of one's own hardware into preset data.

`nccl_tests` reads nccl-tests output, `link_fit` fits a link preset to it, `gemm` turns timed
matmuls into a GPU's `kernels.matmul` share. Pure: text and numbers in, results and preset
documents (plain dicts) out; reading files, running PyTorch and writing YAML live outside the
core (parcalc.calibrate_runner, parcalc.commands.calibrate).
"""
