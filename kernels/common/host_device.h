#pragma once
// Marks math shared verbatim by CPU and CUDA kernels (DESIGN.md principle 2).
#if defined(__CUDACC__)
#define MT_HD __host__ __device__ __forceinline__
#else
#define MT_HD inline
#endif
