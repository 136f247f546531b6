"""Writes a copy of kernels.cu whose cluster kernel stamps its phases (session 37).

    python3 bench/cluster_lab/marks_variant.py crates/backend-cuda/src/kernels.cu /tmp/k_marks.cu
    nvcc ... -DLAB_MARKS -DKERNELS_CU='"/tmp/k_marks.cu"' -o step_marks bench/cluster_lab/step_cluster.cu

Each LABMARK(i) stores block 0's %globaltimer into lab_marks[layer * 16 + i]; step_cluster.cu
(LAB_MARKS) prints each phase's median over layers 1-28. The stamps cost about 0.4 us a layer
(results/step_cluster_marks.txt), so time the kernel without them. Anchors are lines of
cl_layers: a change there may need them moved.
"""
import sys

s=open(sys.argv[1]).read()
K='void cl_layers(const ClusterCtx'
def ins_after(anchor, text):
    global s
    i=s.index(anchor, s.index(K)); j=i+len(anchor); s=s[:j]+text+s[j:]
def rep(old,new):
    global s
    i=s.index(old,s.index(K)); s=s[:i]+new+s[i+len(old):]
ins_after('const float* ffn_norm = reinterpret_cast<const float*>(slots + CL_OFF4);', '\n        LABMARK(0);')
ins_after('if (l > 0) receive(7, CL_D * 4, par ^ 1);', '\n        LABMARK(1);')
rep('TL_MARK(10);','LABMARK(2);')
rep('// ---- C: attention_decode_body', 'LABMARK(13);\n                // ---- C: attention_decode_body')
rep('TL_MARK(11);','LABMARK(3);')
rep("// the head's 64 quantized values", "LABMARK(4);\n            // the head's 64 quantized values")
ins_after('receive(4, CL_NH * (CL_HD + 2 * (int)sizeof(Q8Blk)), par);', '\n        LABMARK(5);')
rep('TL_MARK(13);','LABMARK(6);')
ins_after('receive(5, CL_D * 4, par);', '\n        LABMARK(7);')
ins_after('cl_wait(bar(8), par);', '\n        LABMARK(14);')
ins_after('cl_norm(s.x1, s.o_in, s.xa, ffn_norm, A.eps, s.nq, s.nd);', '\n        LABMARK(8);')
ins_after('        cl_wait(bar(2), par);', '\n        LABMARK(15);')
rep('TL_MARK(14);','LABMARK(9);')
ins_after('receive(6, CL_F + CL_F / 32 * (int)sizeof(Q8Blk), par);', '\n        LABMARK(10);')
ins_after('cl_wait(bar(3), par);', '\n        LABMARK(11);')
rep('TL_MARK(15);','LABMARK(12);')
h='template <bool MASKED>\n__device__ __forceinline__ void cl_layers('
pre='''__device__ unsigned long long lab_marks[32 * 16];
#define LABMARK(i) \\
    if (rank == 0 && tid == 0) { \\
        unsigned long long t_; \\
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_)::"memory"); \\
        lab_marks[l * 16 + (i)] = t_; \\
    }
'''
s=s.replace(h,pre+h)
open(sys.argv[2],'w').write(s)
