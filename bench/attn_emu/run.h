inline void launch(dim3u grid, unsigned threads, size_t smem, const std::function<void()>& body) {
    std::vector<unsigned char> dyn(smem + 64);
    g_dyn_smem = dyn.data();
    gridDim = grid; blockDim = {threads, 1, 1};
    g_shfl.assign(threads, 0.0);
    g_mma.assign(threads * 6, 0.f);
    for (unsigned bz = 0; bz < grid.z; bz++)
    for (unsigned by = 0; by < grid.y; by++)
    for (unsigned bx = 0; bx < grid.x; bx++) {
        std::barrier<> bar(threads);
        g_bar = &bar;
        g_warp_bar.clear();
        for (unsigned w = 0; w < (threads + 31) / 32; w++) g_warp_bar.emplace_back(new std::barrier<>(32));
        std::vector<std::thread> ts;
        for (unsigned t = 0; t < threads; t++)
            ts.emplace_back([&, t, bx, by, bz] { threadIdx = {t, 0, 0}; blockIdx = {bx, by, bz}; body(); });
        for (auto& t : ts) t.join();
    }
}
