#pragma once
// The rendezvous server's socket, bound to the job's --master-addr only (loopback on one node by
// default), never to every interface: c10d's TCPStore is handed it (TCPStoreOptions::masterListenFd)
// instead of binding itself to the wildcard address.
#include <string>

namespace cpt::exec {

// A TCP socket bound to `host`:`port` and listening. RuntimeError naming the address when `host`
// does not resolve or the port cannot be bound. The caller owns the descriptor.
int listen_on(const std::string& host, int port);

}  // namespace cpt::exec
