"""Specifications for the printing helpers in nspy_tutorial.display."""

import pytest

from nspy_tutorial.display import short_kernel_name


@pytest.mark.parametrize(
    ("name", "short"),
    [
        # CUPTI reports mangled names
        ("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_15CUDAFunctor_addIfEESt5arrayIPcLm3EEEEviT0_T1_",
         "at::native::vectorized_elementwise_kernel<CUDAFunctor_add>"),
        ("_ZN2at6native29vectorized_elementwise_kernelILi4EZZZNS0_19addcmul_cuda_kernelERNS_18TensorIteratorBaseE",
         "at::native::vectorized_elementwise_kernel<addcmul_cuda_kernel>"),
        ("_ZN43_GLOBAL__N__b6de9c8c_10_SoftMax_cu_9f978f6320softmax_warp_forwardIfffLi10ELb0ELb0EEEvPT0_PKT_iiiPKbib",
         "(anonymous)::softmax_warp_forward"),
        ("_ZN13pytorch_flash16flash_fwd_kernelI23Flash_fwd_kernel_traitsILi128ELi128ELi64ELi4EEEEvT_",
         "pytorch_flash::flash_fwd_kernel"),
        # Nsight Compute reports demangled names
        ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<float>, "
         "std::array<char *, (unsigned long)3>>(int, T2, T3)",
         "at::native::vectorized_elementwise_kernel<CUDAFunctor_add>"),
        ("void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<float>>(T3)",
         "at::native::reduce_kernel"),
        # names that are neither pass unchanged
        ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"),
        ("triton_poi_fused_add_mul_pow_tanh_0", "triton_poi_fused_add_mul_pow_tanh_0"),
    ],
)
def test_short_kernel_name_keeps_the_function_and_what_it_computes(name, short):
    assert short_kernel_name(name) == short
