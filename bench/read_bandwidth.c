// Streaming read bandwidth of this machine: the floor for generating a token is the bytes of
// weights per token over this figure (BENCHMARKS.md, "What limits us").
//   gcc -O3 -mavx2 -fopenmp bench/read_bandwidth.c -o /tmp/read_bandwidth && OMP_NUM_THREADS=2 /tmp/read_bandwidth
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <omp.h>
#include <string.h>
int main(){ size_t n=(size_t)512<<20; char*b=aligned_alloc(64,n); memset(b,1,n);
 for(int rep=0;rep<5;rep++){ double t=omp_get_wtime(); long tot=0;
 #pragma omp parallel reduction(+:tot)
 { __m256i acc=_mm256_setzero_si256(); 
 #pragma omp for
 for(size_t i=0;i<n;i+=128){ acc=_mm256_add_epi8(acc,_mm256_load_si256((__m256i*)(b+i))); acc=_mm256_add_epi8(acc,_mm256_load_si256((__m256i*)(b+i+32)));acc=_mm256_add_epi8(acc,_mm256_load_si256((__m256i*)(b+i+64)));acc=_mm256_add_epi8(acc,_mm256_load_si256((__m256i*)(b+i+96)));}
 tot+=_mm256_extract_epi8(acc,0);}
 t=omp_get_wtime()-t; printf("%d threads %.1f GB/s (%ld)\n",omp_get_max_threads(),n/t/1e9,tot);}
}
