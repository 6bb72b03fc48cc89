// Package cublas is the examples' cuBLAS, loaded at run time with dlopen
// (built with the cuda tag): the build needs no cuBLAS headers and no
// link-time dependency, only libcublas on the machine that runs it.
// Without the cuda tag it is empty.
package cublas
