#pragma once
// Which catalog GPU a CUDA device is, from the name the driver reports ("NVIDIA H200",
// "NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe", "NVIDIA H100 80GB HBM3"): `cpt calibrate
// --device cuda` starts from that GPU's profile.
#include <optional>
#include <string>

#include "spec/hardware_catalog.h"

namespace cpt::spec {

// The catalog GPU whose name or alias has the most words in `device_name`, all of them found there
// (case-insensitive; words split at ' ', '-' and '_'; "80GB" and "80G" alike). Two rules keep a
// variant from standing in for another: a form factor the name states ("PCIe", "NVL") must be the
// GPU's own (an "H200 NVL" is not the SXM H200: nullopt), and a memory size the name states must not
// contradict the GPU's ("A100-PCIE-40GB" is not the 80 GB PCIe card). nullopt when none matches.
std::optional<std::string> gpu_for_device_name(const std::string& device_name, const HardwareCatalog& catalog);

}  // namespace cpt::spec
