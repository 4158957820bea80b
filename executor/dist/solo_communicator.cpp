#include "core/check.h"
#include "executor/dist/communicator.h"

namespace cpt::exec {

namespace {

class Done : public CommHandle {
 public:
  void wait() override {}
};

class SoloCommunicator : public Communicator {
 public:
  explicit SoloCommunicator(std::string name) : name_(std::move(name)) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }
  std::unique_ptr<CommHandle> all_reduce_sum(torch::Tensor&) override { return std::make_unique<Done>(); }
  std::unique_ptr<CommHandle> all_gather(const torch::Tensor& in, torch::Tensor& out) override {
    out.copy_(in.reshape(out.sizes()));
    return std::make_unique<Done>();
  }
  std::unique_ptr<CommHandle> reduce_scatter_sum(const torch::Tensor& in, torch::Tensor& out) override {
    out.copy_(in.reshape(out.sizes()));
    return std::make_unique<Done>();
  }
  std::unique_ptr<CommHandle> broadcast(torch::Tensor&, int) override { return std::make_unique<Done>(); }
  std::unique_ptr<CommHandle> all_to_all(const torch::Tensor& in, torch::Tensor& out, const std::vector<std::int64_t>&,
                                         const std::vector<std::int64_t>&) override {
    out.copy_(in.reshape(out.sizes()));
    return std::make_unique<Done>();
  }
  std::unique_ptr<CommHandle> send(torch::Tensor&, int peer, int) override {
    CPT_CHECK(false, "send to ", peer, " in a group of one (", name_, ")");
    return nullptr;
  }
  std::unique_ptr<CommHandle> recv(torch::Tensor&, int peer, int) override {
    CPT_CHECK(false, "recv from ", peer, " in a group of one (", name_, ")");
    return nullptr;
  }
  void barrier() override {}

 private:
  std::string name_;
};

}  // namespace

std::unique_ptr<Communicator> make_solo_communicator(std::string name) {
  return std::make_unique<SoloCommunicator>(std::move(name));
}

}  // namespace cpt::exec
