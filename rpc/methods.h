/*
 * methods.h - RPC method ids of every mooncake-c service, and the field ids
 * of their bodies. Ids are part of the wire protocol: never renumber, only
 * add. Ranges: 1-99 core/diagnostics, 100-299 store master, 300-399 embedded
 * transfer metadata, 400-499 transfer engine (handshake, data).
 */
#ifndef MC_RPC_METHODS_H
#define MC_RPC_METHODS_H

enum mc_rpc_method {
    MC_RPC_ECHO = 1,      /* body echoed back unchanged (tests, benchmarks) */
    MC_RPC_ECHO_SLOW = 2, /* echo after {1: delay_us} (tests) */
};

#endif /* MC_RPC_METHODS_H */
