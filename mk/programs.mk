# Programs: $(eval $(call program,NAME,SOURCES)) builds $(BUILD)/NAME.
$(eval $(call program,rpc_bench,perf/rpc_bench.c))
$(eval $(call program,alloc_bench,perf/alloc_bench.c))
$(eval $(call program,mooncake-master,src/master_main.c))
$(eval $(call program,master_bench,perf/master_bench.c))
