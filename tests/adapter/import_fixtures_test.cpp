// Imports every real-tool adapter fixture under tests/fixtures/adapters/<name>/ (written by
// tools/gen_adapter_fixtures.py with PEFT, LyCORIS, mlx-lm, ...) and checks the resolved metadata
// against the fixture's expected.json: one target per recorded module (found through its adapter
// keys) with the recorded scale, rank and embedding flag, and one Replacement per recorded
// replacement. Numerical merge checks live with the merge tests.
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "import_test_util.h"
#include "test_paths.h"

namespace graft::adapter {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<std::string> key_list(const json& keys) {
  std::vector<std::string> out;
  if (keys.is_array())
    for (const auto& k : keys) out.push_back(k.get<std::string>());
  else if (keys.is_object())
    for (auto it = keys.begin(); it != keys.end(); ++it) out.push_back(it.key());
  return out;
}

const AdapterTarget* target_with_key(const WeightAdapter& a, const std::vector<std::string>& keys) {
  for (const auto& t : a.targets)
    for (const auto& k : t.keys)
      for (const auto& want : keys)
        if (k == want) return &t;
  return nullptr;
}

Shape kron_shape(const KroneckerUpdate& k) {
  auto side = [](const Tensor& full, const Tensor& a, const Tensor& b) {
    return full.data ? full.shape : Shape{a.shape[0], b.shape[1]};
  };
  Shape s1 = side(k.w1, k.w1_a, k.w1_b), s2 = side(k.w2, k.w2_a, k.w2_b);
  return {s1[0] * s2[0], s1[1] * s2[1]};
}

float scale_of(const Update& u) {
  if (const auto* l = std::get_if<LowRankUpdate>(&u)) return l->scale;
  if (const auto* k = std::get_if<KroneckerUpdate>(&u)) return k->scale;
  if (const auto* d = std::get_if<DiffUpdate>(&u)) return d->scale;
  if (const auto* h = std::get_if<HadamardUpdate>(&u)) return h->scale;
  if (const auto* r = std::get_if<DoraUpdate>(&u)) return r->lora.scale;
  return 1.0f;
}

TEST(ImportFixtures, EveryRealToolFixtureImportsWithRecordedMetadata) {
  const fs::path root = test::fixture("adapters");
  if (!fs::is_directory(root)) GTEST_SKIP() << "no adapter fixtures at " << root;
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(root)) {
    const fs::path exp_path = entry.path() / "expected.json";
    if (!fs::is_regular_file(exp_path)) continue;
    SCOPED_TRACE(entry.path().filename().string());
    json exp = json::parse(std::ifstream(exp_path));
    std::vector<std::string> files = exp.value("adapter_files", std::vector<std::string>{});
    bool has_config = std::find(files.begin(), files.end(), "adapter_config.json") != files.end();
    ASSERT_FALSE(files.empty());
    std::string path = has_config ? entry.path().string() : (entry.path() / files[0]).string();

    WeightAdapter a;
    ASSERT_NO_THROW(a = read_weight_adapter(path)) << path;
    const std::string fmt = exp.value("format", "");
    const std::map<std::string, AdapterFormat> prefixes = {{"peft", AdapterFormat::Peft},
                                                           {"mlx", AdapterFormat::MlxLm},
                                                           {"lycoris", AdapterFormat::Lycoris},
                                                           {"kohya", AdapterFormat::Kohya}};
    for (const auto& [prefix, f] : prefixes) {
      if (fmt.rfind(prefix, 0) == 0) {
        EXPECT_EQ(a.format, f);
      }
    }

    const json modules = exp.value("modules", json::array());
    const json replacements = exp.value("replacements", json::array());
    for (const auto& m : modules) {
      SCOPED_TRACE(m.value("module", "?"));
      const AdapterTarget* t = target_with_key(a, key_list(m["adapter_keys"]));
      ASSERT_NE(t, nullptr) << "no target for the module's adapter keys";
      if (m.contains("scale") && m["scale"].is_number()) {
        EXPECT_FLOAT_EQ(scale_of(t->update), m["scale"].get<float>());
      }
      if (const auto* l = std::get_if<LowRankUpdate>(&t->update)) {
        if (m.contains("rank")) {
          EXPECT_EQ(l->a.shape[0], m["rank"].get<int64_t>());
        }
        if (m.contains("weight_shape")) {
          EXPECT_EQ((Shape{l->b.shape[0], l->a.shape[1]}), m["weight_shape"].get<Shape>());
        }
      }
      if (const auto* k = std::get_if<KroneckerUpdate>(&t->update); k && m.contains("weight_shape")) {
        EXPECT_EQ(kron_shape(*k), m["weight_shape"].get<Shape>());
      }
      EXPECT_EQ(t->embedding, m.value("base_class", "") == "Embedding");
    }
    for (const auto& r : replacements) {
      const AdapterTarget* t = target_with_key(a, {r["adapter_key"].get<std::string>()});
      ASSERT_NE(t, nullptr) << r.dump();
      EXPECT_TRUE(std::holds_alternative<Replacement>(t->update));
    }
    EXPECT_EQ(a.targets.size(), modules.size() + replacements.size());
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "no expected.json under " << root;
}

}  // namespace
}  // namespace graft::adapter
