// A one-thread kernel that writes the GPU clock (%globaltimer) into slot
// (launch % 64) of a ring: the start (end 0) or the end (end 1) of a
// launch; the end advances the launch counter (timing_methods.cu).
extern "C" __global__ void stamp(unsigned long long *ring, unsigned int *counter, int end) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  unsigned int i = *counter;
  ring[(i % 64) * 2 + end] = t;
  if (end) *counter = i + 1;
}
