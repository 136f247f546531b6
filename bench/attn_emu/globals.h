// The shim's state (shim.h declares it): included once, by each harness's main.cpp.
thread_local dim3u threadIdx, blockIdx;
dim3u blockDim, gridDim;
thread_local EmuBlock* g_blk;
unsigned char* g_dyn_smem;
thread_local unsigned g_cl_rank;
std::barrier<>* g_cl_bar;
unsigned char* g_cl_smem;
size_t g_cl_smem_bytes;
