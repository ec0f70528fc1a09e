// 2-D convolutions (forward, input gradient, kernel gradient) through oneDNN, as XLA FFI handlers.
//
// XLA:CPU's convolution kernels reach about half of PyTorch's training speed on two cores; PyTorch runs
// its CPU convolutions through oneDNN. These handlers give core.onednn the same kernels. Layouts are
// JAX's channels-last ones: activations NHWC, kernels HWIO; float32 only; no dilation, no groups
// (core.onednn checks and falls back to lax for anything else).
//
// Each (kind, shapes, strides, padding) gets its primitive once, cached; kernels are reordered to the
// primitive's preferred layout per call (they are small). Scratchpads are per call, so one primitive
// may run on several XLA threads at once.

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "dnnl.hpp"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;
using dnnl::memory;

namespace {

enum class Kind : int64_t { kForward = 0, kData = 1, kFilter = 2 };

// N, H, W, C, KH, KW, O, OH, OW, SH, SW, PT, PL, PB, PR
using Key = std::array<int64_t, 16>;

struct Geometry {
  int64_t n, h, w, c, kh, kw, o, oh, ow, sh, sw, pt, pl, pb, pr;
};

dnnl::engine& Engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

struct Plan {
  dnnl::primitive prim;
  memory::desc kernel_md;   // the primitive's kernel (or kernel gradient) layout
  memory::desc scratch_md;
  bool reorder_kernel = false;
  dnnl::reorder kernel_reorder;  // HWIO <-> the primitive's layout
  memory::desc reorder_scratch_md;
};

memory::desc Act(int64_t n, int64_t c, int64_t h, int64_t w) {
  return memory::desc({n, c, h, w}, memory::data_type::f32, memory::format_tag::nhwc);
}

memory::desc Hwio(const Geometry& g) {
  return memory::desc({g.o, g.c, g.kh, g.kw}, memory::data_type::f32, memory::format_tag::hwio);
}

dnnl::convolution_forward::primitive_desc ForwardPd(const Geometry& g, const dnnl::primitive_attr& attr) {
  memory::desc any({g.o, g.c, g.kh, g.kw}, memory::data_type::f32, memory::format_tag::any);
  return dnnl::convolution_forward::primitive_desc(
      Engine(), dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
      Act(g.n, g.c, g.h, g.w), any, Act(g.n, g.o, g.oh, g.ow), {g.sh, g.sw}, {g.pt, g.pl},
      {g.pb, g.pr}, attr);
}

std::shared_ptr<Plan> MakePlan(Kind kind, const Geometry& g) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  auto plan = std::make_shared<Plan>();
  auto fwd = ForwardPd(g, attr);
  memory::desc any({g.o, g.c, g.kh, g.kw}, memory::data_type::f32, memory::format_tag::any);
  if (kind == Kind::kForward) {
    plan->prim = dnnl::convolution_forward(fwd);
    plan->kernel_md = fwd.weights_desc();
    plan->scratch_md = fwd.scratchpad_desc();
  } else if (kind == Kind::kData) {
    dnnl::convolution_backward_data::primitive_desc pd(
        Engine(), dnnl::algorithm::convolution_direct, Act(g.n, g.c, g.h, g.w), any,
        Act(g.n, g.o, g.oh, g.ow), {g.sh, g.sw}, {g.pt, g.pl}, {g.pb, g.pr}, fwd, attr);
    plan->prim = dnnl::convolution_backward_data(pd);
    plan->kernel_md = pd.weights_desc();
    plan->scratch_md = pd.scratchpad_desc();
  } else {
    dnnl::convolution_backward_weights::primitive_desc pd(
        Engine(), dnnl::algorithm::convolution_direct, Act(g.n, g.c, g.h, g.w), any,
        Act(g.n, g.o, g.oh, g.ow), {g.sh, g.sw}, {g.pt, g.pl}, {g.pb, g.pr}, fwd, attr);
    plan->prim = dnnl::convolution_backward_weights(pd);
    plan->kernel_md = pd.diff_weights_desc();
    plan->scratch_md = pd.scratchpad_desc();
  }
  memory::desc hwio = Hwio(g);
  plan->reorder_kernel = plan->kernel_md != hwio;
  if (plan->reorder_kernel) {
    dnnl::primitive_attr rattr;
    rattr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    auto rpd = kind == Kind::kFilter
                   ? dnnl::reorder::primitive_desc(Engine(), plan->kernel_md, Engine(), hwio, rattr)
                   : dnnl::reorder::primitive_desc(Engine(), hwio, Engine(), plan->kernel_md, rattr);
    plan->kernel_reorder = dnnl::reorder(rpd);
    plan->reorder_scratch_md = rpd.scratchpad_desc();
  }
  return plan;
}

std::shared_ptr<Plan> GetPlan(Kind kind, const Geometry& g) {
  static std::mutex mu;
  static std::map<Key, std::shared_ptr<Plan>> plans;
  Key key = {static_cast<int64_t>(kind), g.n, g.h, g.w, g.c, g.kh, g.kw, g.o, g.oh, g.ow,
             g.sh, g.sw, g.pt, g.pl, g.pb, g.pr};
  std::lock_guard<std::mutex> lock(mu);
  auto it = plans.find(key);
  if (it != plans.end()) return it->second;
  auto plan = MakePlan(kind, g);
  plans.emplace(key, plan);
  return plan;
}

ffi::Error Geom(ffi::Span<const int64_t> act, ffi::Span<const int64_t> kernel,
                ffi::Span<const int64_t> out, ffi::Span<const int64_t> strides,
                ffi::Span<const int64_t> padding, Geometry* g) {
  if (act.size() != 4 || kernel.size() != 4 || out.size() != 4 || strides.size() != 2 ||
      padding.size() != 4) {
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "onednn_conv: 2-D NHWC / HWIO only");
  }
  *g = Geometry{act[0], act[1], act[2], act[3], kernel[0], kernel[1], kernel[3], out[1], out[2],
                strides[0], strides[1], padding[0], padding[2], padding[1], padding[3]};
  if (kernel[2] != act[3] || out[3] != kernel[3] || out[0] != act[0]) {
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "onednn_conv: shapes do not agree");
  }
  return ffi::Error::Success();
}

// An uninitialised buffer of the descriptor's size (a std::vector would zero it: a memset per
// call on the hot path).
std::unique_ptr<uint8_t[]> Buffer(const memory::desc& md) {
  return std::unique_ptr<uint8_t[]>(new uint8_t[md.get_size() > 0 ? md.get_size() : 1]);
}

// Run the plan for `kind` with `act` (NHWC input or its gradient), `out` (NHWC output or its gradient)
// and the kernel (or its gradient) in HWIO at `kernel`, through a per-call blocked copy where the
// primitive wants another kernel layout.
ffi::Error Run(Kind kind, const Geometry& g, float* act, float* kernel, float* out) {
  try {
    auto plan = GetPlan(kind, g);
    dnnl::stream stream(Engine());
    auto scratch = Buffer(plan->scratch_md);
    memory scratch_mem(plan->scratch_md, Engine(), scratch.get());
    memory hwio(Hwio(g), Engine(), kernel);
    std::unique_ptr<uint8_t[]> blocked;
    std::unique_ptr<uint8_t[]> reorder_scratch;
    memory kernel_mem = hwio;
    memory reorder_scratch_mem;
    if (plan->reorder_kernel) {
      blocked = Buffer(plan->kernel_md);
      kernel_mem = memory(plan->kernel_md, Engine(), blocked.get());
      reorder_scratch = Buffer(plan->reorder_scratch_md);
      reorder_scratch_mem = memory(plan->reorder_scratch_md, Engine(), reorder_scratch.get());
      if (kind != Kind::kFilter) {
        plan->kernel_reorder.execute(stream, {{DNNL_ARG_FROM, hwio}, {DNNL_ARG_TO, kernel_mem},
                                              {DNNL_ARG_SCRATCHPAD, reorder_scratch_mem}});
      }
    }
    memory small(Act(g.n, g.c, g.h, g.w), Engine(), act);
    memory big(Act(g.n, g.o, g.oh, g.ow), Engine(), out);
    if (kind == Kind::kForward) {
      plan->prim.execute(stream, {{DNNL_ARG_SRC, small}, {DNNL_ARG_WEIGHTS, kernel_mem},
                                  {DNNL_ARG_DST, big}, {DNNL_ARG_SCRATCHPAD, scratch_mem}});
    } else if (kind == Kind::kData) {
      plan->prim.execute(stream, {{DNNL_ARG_DIFF_SRC, small}, {DNNL_ARG_WEIGHTS, kernel_mem},
                                  {DNNL_ARG_DIFF_DST, big}, {DNNL_ARG_SCRATCHPAD, scratch_mem}});
    } else {
      plan->prim.execute(stream, {{DNNL_ARG_SRC, small}, {DNNL_ARG_DIFF_WEIGHTS, kernel_mem},
                                  {DNNL_ARG_DIFF_DST, big}, {DNNL_ARG_SCRATCHPAD, scratch_mem}});
      if (plan->reorder_kernel) {
        plan->kernel_reorder.execute(stream, {{DNNL_ARG_FROM, kernel_mem}, {DNNL_ARG_TO, hwio},
                                              {DNNL_ARG_SCRATCHPAD, reorder_scratch_mem}});
      }
    }
    stream.wait();
  } catch (const dnnl::error& e) {
    return ffi::Error(ffi::ErrorCode::kInternal, std::string("oneDNN: ") + e.what());
  }
  return ffi::Error::Success();
}

ffi::Error Forward(ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> w, ffi::ResultBuffer<ffi::F32> y,
                   ffi::Span<const int64_t> strides, ffi::Span<const int64_t> padding) {
  Geometry g;
  if (auto e = Geom(x.dimensions(), w.dimensions(), y->dimensions(), strides, padding, &g);
      e.failure()) {
    return e;
  }
  return Run(Kind::kForward, g, x.typed_data(), w.typed_data(), y->typed_data());
}

ffi::Error Data(ffi::Buffer<ffi::F32> dy, ffi::Buffer<ffi::F32> w, ffi::ResultBuffer<ffi::F32> dx,
                ffi::Span<const int64_t> strides, ffi::Span<const int64_t> padding) {
  Geometry g;
  if (auto e = Geom(dx->dimensions(), w.dimensions(), dy.dimensions(), strides, padding, &g);
      e.failure()) {
    return e;
  }
  return Run(Kind::kData, g, dx->typed_data(), w.typed_data(), dy.typed_data());
}

ffi::Error Filter(ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> dy, ffi::ResultBuffer<ffi::F32> dw,
                  ffi::Span<const int64_t> strides, ffi::Span<const int64_t> padding) {
  Geometry g;
  if (auto e = Geom(x.dimensions(), dw->dimensions(), dy.dimensions(), strides, padding, &g);
      e.failure()) {
    return e;
  }
  return Run(Kind::kFilter, g, x.typed_data(), dw->typed_data(), dy.typed_data());
}

}  // namespace

// Each target takes two float32 arrays and returns one, with the strides and (top, bottom, left,
// right) padding as attributes.
static auto Binding() {
  return ffi::Ffi::Bind()
      .Arg<ffi::Buffer<ffi::F32>>()
      .Arg<ffi::Buffer<ffi::F32>>()
      .Ret<ffi::Buffer<ffi::F32>>()
      .Attr<ffi::Span<const int64_t>>("strides")
      .Attr<ffi::Span<const int64_t>>("padding");
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(OnednnConvForward, Forward, Binding());
XLA_FFI_DEFINE_HANDLER_SYMBOL(OnednnConvData, Data, Binding());
XLA_FFI_DEFINE_HANDLER_SYMBOL(OnednnConvFilter, Filter, Binding());
