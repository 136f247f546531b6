// The shim's state (shim.h declares it): included once, by each harness's main.cpp.
thread_local dim3u threadIdx, blockIdx;
dim3u blockDim, gridDim;
std::barrier<>* g_bar;
std::vector<std::unique_ptr<std::barrier<>>> g_warp_bar;
std::vector<double> g_shfl;
unsigned char* g_dyn_smem;
std::vector<float> g_mma;
