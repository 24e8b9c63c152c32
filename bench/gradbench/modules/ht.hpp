// bench/gradbench/modules/ht.hpp: GradBench's `ht` (evals/ht/README.md; the model is ADBench's
// hand tracker, cpp/gradbench/evals/ht.hpp there): a skinned hand mesh posed by 26 parameters
// theta (global rotation as an angle-axis, global translation, and 20 finger angles), and the
// residuals between data points and their corresponding mesh points -- a vertex ("simple", us
// empty) or a point of a triangle at barycentric coordinates us ("complicated").
//   input {theta: double[26], data: {model: {bone_count, bone_names, parents, base_relatives
//   (4x4 each), inverse_base_absolutes (4x4 each), base_positions (n_verts x 4), weights
//   (n_verts x bones), triangles (x 3), is_mirrored}, correspondences, points (n x 3)},
//   us: [] or n x [2]}
//   objective -> double[3n]; jacobian -> double[3n][26] (simple) or double[3n][2 + 26]
//   (complicated: d/du0 and d/du1 of each residual's own correspondence first)
//
// The Jacobian is forward mode in one pass: the pose on dual<double, 28> numbers (theta seeded
// as partials 0..25), so the bone transforms and the skinned vertices carry all 26 theta
// partials; in the complicated case each correspondence's us are seeded as partials 26 and 27
// of the same numbers where the triangle's point is blended. 26 inputs against 3n outputs is
// forward mode's case (ADBench's manual Jacobian does the same passes by hand).
#pragma once

#include "common.hpp"

#include <dualcast/math/functions.hpp>
#include <dualcast/numbers/dual.hpp>

#include <array>
#include <string>

namespace gradbench::ht {

constexpr std::size_t n_theta = 26;

struct input {
  std::vector<double> theta, us;                    // 26; 2n or empty
  std::size_t bones = 0, verts = 0;                 // the model's sizes
  std::vector<int> parents;                         // bones, each -1 or an earlier bone
  std::vector<double> relatives, inverse_absolutes; // bones x 16, row-major
  std::vector<double> positions, weights;           // verts x 4, verts x bones
  std::vector<std::array<int, 3>> triangles;
  bool mirrored = false;
  std::vector<int> correspondences; // n: vertices (simple) or triangles (complicated)
  std::vector<double> points;       // n x 3
  bool complicated() const { return !us.empty(); }
};

inline std::vector<int> indices(json const &v, std::string const &what, long below) {
  if (!v.is_array())
    throw input_error(what + " must be an array of integers");
  std::vector<int> out;
  for (auto const &x : v) {
    long const i = integer(x, what + "[]", -1);
    if (i >= below)
      throw input_error(what + "[] must be below " + std::to_string(below));
    out.push_back(int(i));
  }
  return out;
}

inline std::vector<double> matrices_4x4(json const &v, std::string const &what, std::size_t n) {
  if (!v.is_array() || v.size() != n)
    throw input_error(what + " must be " + std::to_string(n) + " 4 x 4 matrices");
  std::vector<double> out;
  for (auto const &m : v) {
    std::size_t rows = 4, cols = 4;
    auto r = matrix(m, what + "[]", rows, cols);
    if (cols != 4)
      throw input_error(what + " must be 4 x 4 matrices");
    out.insert(out.end(), r.begin(), r.end());
  }
  return out;
}

inline input parse(json const &in) {
  input r;
  r.theta = numbers(field(in, "theta"), "theta", n_theta);
  auto const &data = field(in, "data");
  auto const &model = field(data, "model");
  auto const &names = field(model, "bone_names");
  if (!names.is_array())
    throw input_error("bone_names must be an array");
  r.bones = names.size();
  // the finger parameters pose bones 2 .. 20 (the pose's columns up to 23)
  if (r.bones < 21)
    throw input_error("the model must have at least 21 bones (the hand's), not " +
                      std::to_string(r.bones));
  r.parents = indices(field(model, "parents"), "parents", long(r.bones));
  if (r.parents.size() != r.bones)
    throw input_error("parents must have one entry per bone");
  for (std::size_t i = 0; i < r.bones; ++i)
    if (r.parents[i] >= int(i))
      throw input_error("parents[" + std::to_string(i) + "] must be -1 or an earlier bone");
  r.relatives = matrices_4x4(field(model, "base_relatives"), "base_relatives", r.bones);
  r.inverse_absolutes =
      matrices_4x4(field(model, "inverse_base_absolutes"), "inverse_base_absolutes", r.bones);
  std::size_t four = 4;
  r.positions = matrix(field(model, "base_positions"), "base_positions", r.verts, four);
  if (four != 4 || r.verts == 0)
    throw input_error("base_positions must be vertices of 4 homogeneous coordinates");
  std::size_t bones = r.bones;
  r.weights = matrix(field(model, "weights"), "weights", r.verts, bones);
  if (bones != r.bones)
    throw input_error("weights must have one column per bone");
  auto const &tris = field(model, "triangles");
  if (!tris.is_array())
    throw input_error("triangles must be an array of 3 vertex indices each");
  for (auto const &t : tris) {
    auto v = indices(t, "triangles[]", long(r.verts));
    if (v.size() != 3 || v[0] < 0 || v[1] < 0 || v[2] < 0)
      throw input_error("triangles must be an array of 3 vertex indices each");
    r.triangles.push_back({v[0], v[1], v[2]});
  }
  auto const &mirrored = field(model, "is_mirrored");
  if (!mirrored.is_boolean())
    throw input_error("is_mirrored must be true or false");
  r.mirrored = mirrored.get<bool>();
  std::size_t n = 0, three = 3;
  r.points = matrix(field(data, "points"), "points", n, three);
  if (three != 3)
    throw input_error("points must have 3 coordinates each");
  auto const &us = field(in, "us");
  std::size_t un = 0, two = 2;
  if (us.is_array() && !us.empty()) {
    un = n;
    r.us = matrix(us, "us", un, two);
    if (two != 2)
      throw input_error("us must have 2 coordinates each");
  }
  long const targets = long(r.complicated() ? r.triangles.size() : r.verts);
  r.correspondences = indices(field(data, "correspondences"), "correspondences", targets);
  if (r.correspondences.size() != n)
    throw input_error("correspondences must have one entry per point");
  for (int c : r.correspondences)
    if (c < 0)
      throw input_error("correspondences[] must be >= 0");
  return r;
}

// ---- the model, on any value type T (double, or dual numbers) --------------------------------
template <class T> using mat3 = std::array<T, 9>;  // row-major
template <class T> using mat4 = std::array<T, 16>; // row-major

// a (r x k) times b (k x c), both row-major, the sums in the order of k
template <std::size_t R, std::size_t K, std::size_t C, class A, class B>
auto product(std::array<A, R * K> const &a, std::array<B, K * C> const &b) {
  using T = decltype(a[0] * b[0]);
  std::array<T, R * C> out;
  for (std::size_t i = 0; i < R; ++i)
    for (std::size_t j = 0; j < C; ++j) {
      T s = a[i * K] * b[j];
      for (std::size_t k = 1; k < K; ++k)
        s = s + a[i * K + k] * b[k * C + j];
      out[i * C + j] = s;
    }
  return out;
}

// Rotation by the angle |r| about r / |r| (Rodrigues); the identity below |r| = 1e-4.
template <class T> mat3<T> angle_axis_rotation(T const *r) {
  using dc::cos, dc::sin, dc::sqrt, std::cos, std::sin, std::sqrt;
  T const norm = sqrt(r[0] * r[0] + r[1] * r[1] + r[2] * r[2]);
  if (norm < 1e-4)
    return {T(1.0), T(0.0), T(0.0), T(0.0), T(1.0), T(0.0), T(0.0), T(0.0), T(1.0)};
  T const x = r[0] / norm, y = r[1] / norm, z = r[2] / norm, s = sin(norm), c = cos(norm);
  return {x * x + (1.0 - x * x) * c, x * y * (1.0 - c) - z * s, x * z * (1.0 - c) + y * s,
          x * y * (1.0 - c) + z * s, y * y + (1.0 - y * y) * c, y * z * (1.0 - c) - x * s,
          x * z * (1.0 - c) - y * s, z * y * (1.0 - c) + x * s, z * z + (1.0 - z * z) * c};
}

// A bone's rotation from its angles (x, z, y order in the pose): Rz Ry Rx.
template <class T> mat3<T> euler_rotation(T const &ax, T const &az, T const &ay) {
  using dc::cos, dc::sin, std::cos, std::sin;
  T const o(0.0), l(1.0);
  T const cx = cos(ax), sx = sin(ax), cy = cos(ay), sy = sin(ay), cz = cos(az), sz = sin(az);
  mat3<T> const rx{l, o, o, o, cx, -sx, o, sx, cx};
  mat3<T> const ry{cy, o, sy, o, l, o, -sy, o, cy};
  mat3<T> const rz{cz, -sz, o, sz, cz, o, o, o, l};
  return product<3, 3, 3>(product<3, 3, 3>(rz, ry), rx);
}

// The pose: 3 x (bones + 3) values, column-major here (column c at 3c): column 0 the global
// rotation, 1 the global scale (1), 2 the translation, 3 + b bone b's angles.
template <class T> std::vector<T> pose_of(T const *theta, std::size_t bones) {
  std::vector<T> pose(3 * (bones + 3), T(0.0));
  for (int i = 0; i < 3; ++i)
    pose[std::size_t(i)] = theta[i], pose[std::size_t(3 + i)] = T(1.0),
    pose[std::size_t(6 + i)] = theta[3 + i];
  std::size_t t = 6, col = 5;
  for (int finger = 0; finger < 5; ++finger, ++col)
    for (int joint = 0; joint < 3; ++joint, ++col) {
      pose[3 * col] = theta[t++];
      if (joint == 0) // the finger's base joint also bends sideways
        pose[3 * col + 1] = theta[t++];
    }
  return pose;
}

// The skinned, posed positions of the vertices in `wanted`, 3 each in the order of `wanted`.
template <class T>
std::vector<T> skinned(input const &in, T const *theta, std::vector<int> const &wanted) {
  std::size_t const nb = in.bones;
  auto const pose = pose_of(theta, nb);
  // bone transforms: absolute (parent's absolute x relative) x inverse base absolute
  std::vector<mat4<T>> absolute(nb), transform(nb);
  for (std::size_t b = 0; b < nb; ++b) {
    auto const r = euler_rotation(pose[3 * (b + 3)], pose[3 * (b + 3) + 1], pose[3 * (b + 3) + 2]);
    mat4<T> posed{};
    posed.fill(T(0.0));
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j)
        posed[std::size_t(4 * i + j)] = r[std::size_t(3 * i + j)];
    posed[15] = T(1.0);
    mat4<double> base;
    std::copy_n(&in.relatives[16 * b], 16, base.begin());
    auto const relative = product<4, 4, 4>(base, posed);
    absolute[b] = in.parents[b] < 0
                      ? relative
                      : product<4, 4, 4>(absolute[std::size_t(in.parents[b])], relative);
    mat4<double> inverse;
    std::copy_n(&in.inverse_absolutes[16 * b], 16, inverse.begin());
    transform[b] = product<4, 4, 4>(absolute[b], inverse);
  }
  auto const global = angle_axis_rotation(&pose[0]);
  std::vector<T> out(3 * wanted.size());
  for (std::size_t slot = 0; slot < wanted.size(); ++slot) {
    int const v = wanted[slot];
    double const *p = &in.positions[4 * std::size_t(v)];
    std::array<T, 3> x{T(0.0), T(0.0), T(0.0)};
    for (std::size_t b = 0; b < nb; ++b) {
      double const w = in.weights[std::size_t(v) * nb + b];
      if (w == 0) // (most vertices follow a few bones)
        continue;
      auto const &m = transform[b];
      for (int i = 0; i < 3; ++i)
        x[i] =
            x[i] +
            (m[4 * i] * p[0] + m[4 * i + 1] * p[1] + m[4 * i + 2] * p[2] + m[4 * i + 3] * p[3]) * w;
    }
    if (in.mirrored)
      x[0] = -x[0];
    for (int i = 0; i < 3; ++i) // global rotation (columns scaled by pose column 1), translation
      out[3 * slot + std::size_t(i)] = global[3 * i] * pose[3] * x[0] +
                                       global[3 * i + 1] * pose[4] * x[1] +
                                       global[3 * i + 2] * pose[5] * x[2] + pose[6 + i];
  }
  return out;
}

// The residuals point - model point, calling out(i, j, residual) for coordinate j of point i;
// pos holds the skinned vertices in the order of `wanted` (vertex v at 3 slot[v]); the
// complicated case's us are made by make_u(i, k) (plain, or seeded duals).
template <class T, class MakeU, class Out>
void residuals(input const &in, std::vector<T> const &pos, std::vector<int> const &slot,
               MakeU const &make_u, Out const &out) {
  for (std::size_t i = 0; i < in.correspondences.size(); ++i) {
    std::size_t const c = std::size_t(in.correspondences[i]);
    if (!in.complicated()) {
      for (int j = 0; j < 3; ++j)
        out(i, j,
            in.points[3 * i + std::size_t(j)] - pos[3 * std::size_t(slot[c]) + std::size_t(j)]);
      continue;
    }
    auto const &tv = in.triangles[c];
    std::array<std::size_t, 3> const t{std::size_t(slot[std::size_t(tv[0])]),
                                       std::size_t(slot[std::size_t(tv[1])]),
                                       std::size_t(slot[std::size_t(tv[2])])};
    auto const u0 = make_u(i, 0), u1 = make_u(i, 1);
    for (int j = 0; j < 3; ++j) {
      auto const point = u0 * pos[3 * t[0] + std::size_t(j)] + u1 * pos[3 * t[1] + std::size_t(j)] +
                         (1.0 - u0 - u1) * pos[3 * t[2] + std::size_t(j)];
      out(i, j, in.points[3 * i + std::size_t(j)] - point);
    }
  }
}

// The vertices the residuals read, in increasing order (computed once per input: the "prepare"
// step), and each one's place in that list (slot).
inline std::vector<int> wanted_vertices(input const &in) {
  std::vector<char> mark(in.verts, 0);
  for (int c : in.correspondences) {
    if (in.complicated())
      for (int v : in.triangles[std::size_t(c)])
        mark[std::size_t(v)] = 1;
    else
      mark[std::size_t(c)] = 1;
  }
  std::vector<int> out;
  for (std::size_t v = 0; v < in.verts; ++v)
    if (mark[v])
      out.push_back(int(v));
  return out;
}

inline std::vector<int> slots_of(input const &in, std::vector<int> const &wanted) {
  std::vector<int> slot(in.verts, -1);
  for (std::size_t k = 0; k < wanted.size(); ++k)
    slot[std::size_t(wanted[k])] = int(k);
  return slot;
}

struct objective : job {
  input const &in;
  std::vector<int> wanted, slot;
  std::vector<double> err;
  explicit objective(input const &i)
      : in(i), wanted(wanted_vertices(i)), slot(slots_of(i, wanted)) {}
  void run() override {
    auto const pos = skinned(in, in.theta.data(), wanted);
    err.resize(3 * in.correspondences.size());
    residuals(
        in, pos, slot, [&](std::size_t i, int k) { return in.us[2 * i + std::size_t(k)]; },
        [&](std::size_t i, int j, double e) { err[3 * i + std::size_t(j)] = e; });
  }
  json output() const override { return err; }
};

struct jacobian : job {
  using d = dc::dual<double, int(n_theta) + 2>; // theta's 26 partials, then u0 and u1
  input const &in;
  std::vector<int> wanted, slot;
  std::vector<d> theta;
  std::size_t cols = 0;
  std::vector<double> jac; // 3n x cols, row-major
  explicit jacobian(input const &i)
      : in(i), wanted(wanted_vertices(i)), slot(slots_of(i, wanted)),
        cols((i.complicated() ? 2 : 0) + n_theta) {
    for (std::size_t k = 0; k < n_theta; ++k)
      theta.push_back(d::variable(in.theta[k], int(k)));
  }
  void run() override {
    auto const pos = skinned(in, theta.data(), wanted);
    jac.assign(3 * in.correspondences.size() * cols, 0.0);
    std::size_t const first = in.complicated() ? 2 : 0; // the theta columns
    residuals(
        in, pos, slot,
        [&](std::size_t i, int k) {
          return d::variable(in.us[2 * i + std::size_t(k)], int(n_theta) + k);
        },
        [&](std::size_t i, int j, d const &e) {
          double *row = &jac[(3 * i + std::size_t(j)) * cols];
          for (std::size_t k = 0; k < n_theta; ++k)
            row[first + k] = e.d[k];
          if (first)
            row[0] = e.d[n_theta], row[1] = e.d[n_theta + 1];
        });
  }
  json output() const override { return rows_of(jac, cols); }
};

inline void add(registry &r) {
  r.add("ht", "objective", make_function<input, objective>(parse));
  r.add("ht", "jacobian", make_function<input, jacobian>(parse));
}

} // namespace gradbench::ht
