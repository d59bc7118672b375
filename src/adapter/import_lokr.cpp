// LoKr factor reading, shared by PEFT LoKr (import_peft.cpp, scale alpha/r) and LyCORIS LoKr in
// single-file adapters (import_kohya.cpp, LyCORIS scale rule). Only matrix factors are read:
// Tucker cores (lokr_t1/lokr_t2) and convolution-shaped factors are refused by the callers / here.
//
// ΔW = scale · kron(W1, W2); W1 = lokr_w1 [p, q] or lokr_w1_a [p, r] · lokr_w1_b [r, q];
// W2 = lokr_w2 [m, n] or lokr_w2_a [m, r] · lokr_w2_b [r, n]; ΔW = [p·m, q·n].
#include <string>

#include "import_common.h"

namespace graft::adapter::detail {

bool is_lokr_role(std::string_view role) {
  return role == "lokr_w1" || role == "lokr_w1_a" || role == "lokr_w1_b" || role == "lokr_w2" ||
         role == "lokr_w2_a" || role == "lokr_w2_b";
}

namespace {

struct Factor {
  Tensor full, a, b;
};

const std::string* find_role(const RoleKeys& roles, const std::string& role) {
  auto it = roles.find(role);
  return it == roles.end() ? nullptr : &it->second;
}

Tensor read_matrix(const io::SafetensorsFile& f, const std::string& key) {
  Tensor t = read_checked(f, key);
  if (t.shape.size() != 2)
    fail("'", f.path(), "': tensor '", key, "' has shape ", shape_str(t.shape),
         t.shape.size() > 2 ? "; convolution-shaped factors are not supported" : "", "; expected a 2-D factor");
  if (t.shape[0] == 0 || t.shape[1] == 0)
    fail("'", f.path(), "': tensor '", key, "' has an empty shape ", shape_str(t.shape), "; expected a 2-D factor");
  return t;
}

Factor read_factor(const io::SafetensorsFile& f, const std::string& module, const RoleKeys& roles,
                   const std::string& w) {
  const std::string* full = find_role(roles, "lokr_" + w);
  const std::string* a = find_role(roles, "lokr_" + w + "_a");
  const std::string* b = find_role(roles, "lokr_" + w + "_b");
  Factor out;
  if (full && (a || b))
    fail("'", f.path(), "': module '", module, "' has both '", *full, "' and '", a ? *a : *b,
         "'; expected either lokr_", w, " or the pair lokr_", w, "_a/lokr_", w, "_b");
  if (full) {
    out.full = read_matrix(f, *full);
    return out;
  }
  if (!a && !b)
    fail("'", f.path(), "': module '", module, "' has no ", w, " factor; expected lokr_", w, " or both lokr_", w,
         "_a and lokr_", w, "_b");
  if (!a || !b)
    fail("'", f.path(), "': tensor '", a ? *a : *b, "' has no partner lokr_", w, a ? "_b" : "_a",
         "; expected lokr_", w, " or both lokr_", w, "_a and lokr_", w, "_b");
  out.a = read_matrix(f, *a);
  out.b = read_matrix(f, *b);
  if (out.a.shape[1] != out.b.shape[0])
    fail("'", f.path(), "': tensors '", *a, "' ", shape_str(out.a.shape), " and '", *b, "' ", shape_str(out.b.shape),
         " do not chain; expected lokr_", w, "_a [p, r] and lokr_", w, "_b [r, q]");
  return out;
}

Shape factor_shape(const Tensor& full, const Tensor& a, const Tensor& b) {
  if (full.data) return full.shape;
  return {a.shape[0], b.shape[1]};
}

}  // namespace

KroneckerUpdate read_kronecker(const io::SafetensorsFile& f, const std::string& module, const RoleKeys& roles) {
  Factor w1 = read_factor(f, module, roles, "w1");
  Factor w2 = read_factor(f, module, roles, "w2");
  KroneckerUpdate u;
  u.w1 = w1.full;
  u.w1_a = w1.a;
  u.w1_b = w1.b;
  u.w2 = w2.full;
  u.w2_a = w2.a;
  u.w2_b = w2.b;
  u.scale = 1.0f;
  return u;
}

HadamardUpdate read_hadamard(const io::SafetensorsFile& f, const std::string& module, const RoleKeys& roles) {
  HadamardUpdate u;
  Tensor* slots[] = {&u.w1a, &u.w1b, &u.w2a, &u.w2b};
  const char* names[] = {"hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b"};
  for (int i = 0; i < 4; ++i) {
    const std::string* key = find_role(roles, names[i]);
    if (!key)
      fail("'", f.path(), "': module '", module, "' has no ", names[i],
           "; expected all four LoHa factors hada_w1_a, hada_w1_b, hada_w2_a, hada_w2_b");
    *slots[i] = read_matrix(f, *key);
  }
  if (u.w1a.shape[1] != u.w1b.shape[0] || u.w2a.shape[1] != u.w2b.shape[0] || u.w1a.shape[0] != u.w2a.shape[0] ||
      u.w1b.shape[1] != u.w2b.shape[1])
    fail("'", f.path(), "': module '", module, "' has LoHa factors hada_w1_a ", shape_str(u.w1a.shape), ", hada_w1_b ",
         shape_str(u.w1b.shape), ", hada_w2_a ", shape_str(u.w2a.shape), ", hada_w2_b ", shape_str(u.w2b.shape),
         " that do not chain; expected w1_a [out, r1], w1_b [r1, in], w2_a [out, r2], w2_b [r2, in]");
  u.scale = 1.0f;
  return u;
}

std::optional<int64_t> lycoris_lokr_dim(const KroneckerUpdate& u) {
  std::optional<int64_t> dim;
  if (u.w1_b.data) dim = u.w1_b.shape[0];
  if (u.w2_b.data) dim = u.w2_b.shape[0];
  return dim;
}

Shape kronecker_shape(const KroneckerUpdate& u) {
  Shape s1 = factor_shape(u.w1, u.w1_a, u.w1_b);
  Shape s2 = factor_shape(u.w2, u.w2_a, u.w2_b);
  return {s1[0] * s2[0], s1[1] * s2[1]};
}

}  // namespace graft::adapter::detail
