// An mlx-lm quantized checkpoint seen two ways. As a TensorSource it presents every quantized
// module's `<m>.weight` at its logical [rows, cols] shape in F32 (dequantized on read) and hides
// `<m>.scales` / `<m>.biases`: what adapter binding, bind-time shape checks and the explicit
// --fuse-requantize route see. The weight loader asks quantized() for the packed codes instead,
// so running the model never materializes a dequantized copy.
#pragma once
#include <map>
#include <memory>

#include "graft/core/affine_quant.h"
#include "graft/io/tensor_source.h"
#include "graft/model/config.h"

namespace graft::model {

class QuantizedCheckpointSource : public io::TensorSource {
 public:
  // Finds the quantized modules (a `.scales` tensor exists, as in mlx-lm) and checks each one's
  // codes, scales and biases against its spec; one error lists every problem.
  QuantizedCheckpointSource(std::shared_ptr<const io::TensorSource> raw, const QuantizationConfig& config);

  std::vector<std::string> names() const override;
  std::optional<io::TensorInfo> info(const std::string& name) const override;
  Tensor read(const std::string& name) const override;
  std::string describe() const override { return raw_->describe(); }
  void release(const std::string& name) const override;

  // Whether `weight_name` ("<m>.weight") is stored quantized, and its packed form.
  bool is_quantized(const std::string& weight_name) const { return modules_.count(weight_name) != 0; }
  AffineQuantized quantized(const std::string& weight_name) const;
  QuantSpec spec(const std::string& weight_name) const;
  DType scale_dtype(const std::string& weight_name) const;  // as stored (the model dtype)
  std::vector<std::string> quantized_weights() const;
  size_t quantized_count() const { return modules_.size(); }

 private:
  struct Module {
    QuantSpec spec;
    int64_t rows = 0, cols = 0;
    DType scale_dtype = DType::F32;
    std::string stem;
  };
  std::shared_ptr<const io::TensorSource> raw_;
  std::map<std::string, Module> modules_;  // by weight name
};

}  // namespace graft::model
