// Package cublas is the examples' cuBLAS, loaded at run time with dlopen
// (built with the cuda tag): the build needs no cuBLAS headers and no
// link-time dependency, only libcublas on the machine that runs it.
// Library and SgemmCall make it a lanes library (a handle and workspace
// per lane) and its SGEMM a call of it, on both builds: without the cuda
// tag the simulated device runs the call's Go reference.
package cublas
