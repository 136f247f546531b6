inline void launch(dim3u grid, unsigned threads, size_t smem, const std::function<void()>& body) {
    std::vector<unsigned char> dyn(smem + 64);
    g_dyn_smem = dyn.data();
    gridDim = grid; blockDim = {threads, 1, 1};
    for (unsigned bz = 0; bz < grid.z; bz++)
    for (unsigned by = 0; by < grid.y; by++)
    for (unsigned bx = 0; bx < grid.x; bx++) {
        EmuBlock blk(threads);
        std::vector<std::thread> ts;
        for (unsigned t = 0; t < threads; t++)
            ts.emplace_back([&, t, bx, by, bz] { g_blk = &blk; threadIdx = {t, 0, 0}; blockIdx = {bx, by, bz}; body(); });
        for (auto& t : ts) t.join();
    }
}

// A cluster kernel of `cq` blocks along z (grid.z == cq): each cluster's blocks run at once,
// block z of the cluster its rank, with `smem_bytes` of the kernel's shared memory each
// (filled with a pattern: nothing reads what it did not write).
inline void launch_cluster(dim3u grid, unsigned threads, unsigned cq, size_t smem_bytes,
                           const std::function<void()>& body) {
    gridDim = grid; blockDim = {threads, 1, 1};
    std::vector<unsigned char> sm(smem_bytes * cq);
    g_cl_smem = sm.data();
    g_cl_smem_bytes = smem_bytes;
    for (unsigned by = 0; by < grid.y; by++)
    for (unsigned bx = 0; bx < grid.x; bx++) {
        std::fill(sm.begin(), sm.end(), (unsigned char)0x7f);
        std::barrier<> cl(threads * cq);
        g_cl_bar = &cl;
        std::vector<std::unique_ptr<EmuBlock>> blks;
        for (unsigned z = 0; z < cq; z++) blks.emplace_back(new EmuBlock(threads));
        std::vector<std::thread> ts;
        for (unsigned z = 0; z < cq; z++)
            for (unsigned t = 0; t < threads; t++)
                ts.emplace_back([&, t, bx, by, z] {
                    g_blk = blks[z].get();
                    g_cl_rank = z;
                    threadIdx = {t, 0, 0};
                    blockIdx = {bx, by, z};
                    body();
                });
        for (auto& t : ts) t.join();
    }
}
