# The reference model's forward on the GPU vs the CPU runtime (included from
# bench/CMakeLists.txt when QVG_WITH_CUDA is on). Needs no Google Benchmark.
add_executable(bench_model_cuda ${CMAKE_CURRENT_LIST_DIR}/bench_model_cuda.cpp)
target_link_libraries(bench_model_cuda PRIVATE qvg)
target_compile_definitions(bench_model_cuda PRIVATE QVG_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
