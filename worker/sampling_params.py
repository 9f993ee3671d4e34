"""SamplingParams lives in common/ (both sides build it); this name stays for old imports."""

from common.sampling_params import SamplingParams

__all__ = ["SamplingParams"]
