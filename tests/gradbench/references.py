"""Plain-Python references for the GradBench modules the tool implements (the formulas of
GradBench's evals/<name>/README.md and cpp/gradbench/evals/<name>.hpp), and central differences:
the independent answers tests/gradbench/check_tool.py compares the tool with. Standard library
only."""
import math


def lse(x):
    m = max(x)
    return m + math.log(sum(math.exp(v - m) for v in x))


def lstm(main, extra, state, seq):
    l, b = len(main) // 2, len(main[0]) // 4
    h = [list(state[2 * k]) for k in range(l)]
    s = [list(state[2 * k + 1]) for k in range(l)]
    sig = lambda v: 1 / (1 + math.exp(-v))
    total = 0.0
    for t in range(len(seq) - 1):
        x = [seq[t][i] * extra[0][i] for i in range(b)]
        for k in range(l):
            w, bias = main[2 * k], main[2 * k + 1]
            for i in range(b):
                f = sig(x[i] * w[i] + bias[i])
                ig = sig(h[k][i] * w[b + i] + bias[b + i])
                o = sig(x[i] * w[2 * b + i] + bias[2 * b + i])
                g = math.tanh(h[k][i] * w[3 * b + i] + bias[3 * b + i])
                s[k][i] = s[k][i] * f + ig * g
                h[k][i] = o * math.tanh(s[k][i])
            x = list(h[k])
        y = [x[i] * extra[1][i] + extra[2][i] for i in range(b)]
        norm = math.log(sum(math.exp(v) for v in y) + 2)
        total += sum(seq[t + 1][i] * (y[i] - norm) for i in range(b))
    return -total / ((len(seq) - 1) * b)


def gmm(inp, alpha, mu, q, l):
    d, k, n, m, gamma = inp["d"], inp["k"], inp["n"], inp["m"], inp["gamma"]
    x = inp["x"]
    slse = 0.0
    for i in range(n):
        terms = []
        for c in range(k):
            xc = [x[i][j] - mu[c][j] for j in range(d)]
            qx = [math.exp(q[c][j]) * xc[j] for j in range(d)]
            idx = 0
            for a in range(d):  # L's strictly lower part, column by column
                for bb in range(a + 1, d):
                    qx[bb] += l[c][idx] * xc[a]
                    idx += 1
            terms.append(alpha[c] + sum(q[c]) - 0.5 * sum(v * v for v in qx))
        slse += lse(terms)
    dof = d + m + 1
    lgd = 0.25 * d * (d - 1) * math.log(math.pi) + sum(
        math.lgamma(0.5 * dof + 0.5 * (1 - j)) for j in range(1, d + 1))
    c_prior = dof * d * (math.log(gamma) - 0.5 * math.log(2)) - lgd
    prior = sum(0.5 * gamma * gamma * (sum(math.exp(2 * v) for v in q[c]) +
                                       sum(v * v for v in l[c])) - m * sum(q[c])
                for c in range(k))
    return (-n * d * 0.5 * math.log(2 * math.pi) + slse - n * lse(alpha) - prior + k * c_prior)


def kmeans(points, centroids):
    return sum(min(sum((c[a] - p[a]) ** 2 for a in range(len(p))) for c in centroids)
               for p in points)


def ba_reprojection(cam, X, w, feat):
    r, C = cam[0:3], cam[3:6]
    p = [X[i] - C[i] for i in range(3)]
    sq = sum(v * v for v in r)
    if sq != 0:
        theta = math.sqrt(sq)
        wv = [v / theta for v in r]
        cross = [wv[1] * p[2] - wv[2] * p[1], wv[2] * p[0] - wv[0] * p[2],
                 wv[0] * p[1] - wv[1] * p[0]]
        tmp = sum(wv[i] * p[i] for i in range(3)) * (1 - math.cos(theta))
        y = [p[i] * math.cos(theta) + cross[i] * math.sin(theta) + wv[i] * tmp for i in range(3)]
    else:
        y = [p[0] + r[1] * p[2] - r[2] * p[1], p[1] + r[2] * p[0] - r[0] * p[2],
             p[2] + r[0] * p[1] - r[1] * p[0]]
    e = [y[0] / y[2], y[1] / y[2]]
    rsq = e[0] ** 2 + e[1] ** 2
    dist = 1 + cam[9] * rsq + cam[10] * rsq * rsq
    return [w * (e[0] * dist * cam[6] + cam[7] - feat[0]),
            w * (e[1] * dist * cam[6] + cam[8] - feat[1])]


def central_gradient(f, x, h=1e-6):
    """d f / d x_i for a flat list x, by central differences with a step relative to |x_i|."""
    g = []
    for i in range(len(x)):
        step = h * max(1.0, abs(x[i]))
        up, down = list(x), list(x)
        up[i] += step
        down[i] -= step
        g.append((f(up) - f(down)) / (2 * step))
    return g


def central_second(f, x, i, h=1e-3):
    up, down = list(x), list(x)
    up[i] += h
    down[i] -= h
    return (f(up) - 2 * f(x) + f(down)) / (h * h)


def llsq(x, n):
    total = 0.0
    for i in range(n):
        t = -1 + i * 2 / (n - 1)
        r = (t > 0) - (t < 0)
        r -= sum(x[j] * t ** j for j in range(len(x)))
        total += r * r
    return total / 2


def ode(x, s):
    """RK4, s steps from y(0) = 0 to t = 2, y' = f(y), f(y)_0 = x_0, f(y)_i = x_i y_{i-1}."""
    n, h = len(x), 2.0 / s
    f = lambda y: [x[0]] + [x[i] * y[i - 1] for i in range(1, n)]
    y = [0.0] * n
    for _ in range(s):
        k1 = f(y)
        k2 = f([y[i] + h / 2 * k1[i] for i in range(n)])
        k3 = f([y[i] + h / 2 * k2[i] for i in range(n)])
        k4 = f([y[i] + h * k3[i] for i in range(n)])
        y = [y[i] + h / 6 * (k1[i] + 2 * k2[i] + 2 * k3[i] + k4[i]) for i in range(n)]
    return y


def det(a, n):
    """The determinant of the n x n row-major a by the Leibniz formula (small n only)."""
    import itertools
    total = 0.0
    for perm in itertools.permutations(range(n)):
        inversions = sum(1 for i in range(n) for j in range(i + 1, n) if perm[i] > perm[j])
        term = -1.0 if inversions % 2 else 1.0
        for i in range(n):
            term *= a[i * n + perm[i]]
        total += term
    return total


# ---- ht: the hand model (evals/ht/README.md, ADBench's hand tracker) ----------------------------
def _mat(a, r, k, b, c):
    return [[sum(a[i][x] * b[x][j] for x in range(k)) for j in range(c)] for i in range(r)]


def _rot_x(t):
    c, s = math.cos(t), math.sin(t)
    return [[1, 0, 0], [0, c, -s], [0, s, c]]


def _rot_y(t):
    c, s = math.cos(t), math.sin(t)
    return [[c, 0, s], [0, 1, 0], [-s, 0, c]]


def _rot_z(t):
    c, s = math.cos(t), math.sin(t)
    return [[c, -s, 0], [s, c, 0], [0, 0, 1]]


def _angle_axis(r):
    n = math.sqrt(sum(v * v for v in r))
    if n < 1e-4:
        return [[1, 0, 0], [0, 1, 0], [0, 0, 1]]
    k = [v / n for v in r]
    K = [[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]]
    KK = _mat(K, 3, 3, K, 3)
    s, c = math.sin(n), math.cos(n)
    return [[(1 if i == j else 0) + s * K[i][j] + (1 - c) * KK[i][j] for j in range(3)]
            for i in range(3)]


def ht_vertices(theta, model):
    """The posed, skinned vertices (3 each)."""
    nb = len(model["bone_names"])
    # the pose: per column (global rotation, scale 1, translation, then one per bone)
    pose = [[0.0] * 3 for _ in range(nb + 3)]
    pose[0] = list(theta[0:3])
    pose[1] = [1.0, 1.0, 1.0]
    pose[2] = list(theta[3:6])
    t, col = 6, 5
    for _ in range(5):
        for joint in range(3):
            pose[col][0] = theta[t]
            t += 1
            if joint == 0:
                pose[col][1] = theta[t]
                t += 1
            col += 1
        col += 1
    absolute = []
    transforms = []
    for b in range(nb):
        ax, az, ay = pose[b + 3]
        r = _mat(_mat(_rot_z(az), 3, 3, _rot_y(ay), 3), 3, 3, _rot_x(ax), 3)
        posed = [r[0] + [0.0], r[1] + [0.0], r[2] + [0.0], [0.0, 0.0, 0.0, 1.0]]
        rel = _mat(model["base_relatives"][b], 4, 4, posed, 4)
        p = model["parents"][b]
        absolute.append(rel if p < 0 else _mat(absolute[p], 4, 4, rel, 4))
        transforms.append(_mat(absolute[b], 4, 4, model["inverse_base_absolutes"][b], 4))
    g = _angle_axis(pose[0])
    out = []
    for v, base in enumerate(model["base_positions"]):
        x = [0.0, 0.0, 0.0]
        for b in range(nb):
            w = model["weights"][v][b]
            for i in range(3):
                x[i] += w * sum(transforms[b][i][k] * base[k] for k in range(4))
        if model["is_mirrored"]:
            x[0] = -x[0]
        out.append([sum(g[i][k] * x[k] for k in range(3)) + pose[2][i] for i in range(3)])
    return out


def ht_objective(theta, us, data):
    """The residuals point - model point (3 per correspondence); us flat (2 per point) or []."""
    verts = ht_vertices(theta, data["model"])
    err = []
    for i, c in enumerate(data["correspondences"]):
        if us:
            t = data["model"]["triangles"][c]
            u0, u1 = us[2 * i], us[2 * i + 1]
            point = [u0 * verts[t[0]][j] + u1 * verts[t[1]][j] + (1 - u0 - u1) * verts[t[2]][j]
                     for j in range(3)]
        else:
            point = verts[c]
        err += [data["points"][i][j] - point[j] for j in range(3)]
    return err


# ---- particle and saddle: the descent of GradBench's C++ tools, derivatives by differences -------
def descent_argmin(f, g, x):
    fx, gx, eta, accepted = f(x), g(x), 1e-5, 0
    while True:
        if math.sqrt(sum(v * v for v in gx)) <= 1e-5:
            return x
        if accepted == 10:
            eta, accepted = eta * 2, 0
            continue
        nxt = [x[j] - eta * gx[j] for j in range(len(x))]
        if math.sqrt(sum((a - b) ** 2 for a, b in zip(nxt, x))) <= 1e-5:
            return x
        fn = f(nxt)
        if fn < fx:
            x, fx, gx, accepted = nxt, fn, g(nxt), accepted + 1
        else:
            eta, accepted = eta / 2, 0


def descent_argmax(f, g, x):
    return descent_argmin(lambda v: -f(v), lambda v: [-e for e in g(v)], x)


def particle_trajectory(w, h=1e-6):
    """x(t_f)^2 for the charge at (10, 10 - w); the force from central differences of p."""
    def p(a, b):
        return sum(1 / math.hypot(cx - a, cy - b) for cx, cy in ((10.0, 10.0 - w), (10.0, 0.0)))
    x, v = [0.0, 8.0], [0.75, 0.0]
    while True:
        force = [-(p(x[0] + h, x[1]) - p(x[0] - h, x[1])) / (2 * h),
                 -(p(x[0], x[1] + h) - p(x[0], x[1] - h)) / (2 * h)]
        nx = [x[0] + 0.1 * v[0], x[1] + 0.1 * v[1]]
        if nx[1] <= 0:
            tf = -nx[1] / v[1]
            return (nx[0] + tf * v[0]) ** 2
        x, v = nx, [v[0] + 0.1 * force[0], v[1] + 0.1 * force[1]]


def particle(w0):
    return descent_argmin(lambda v: particle_trajectory(v[0]),
                          lambda v: central_gradient(lambda u: particle_trajectory(u[0]), v), [w0])[0]


def saddle(start):
    f = lambda p, q: (p[0] ** 2 + p[1] ** 2) - (q[0] ** 2 + q[1] ** 2)
    def inner_max(p):
        q = descent_argmax(lambda q: f(p, q), lambda q: central_gradient(lambda u: f(p, u), q),
                           list(start))
        return f(p, q)
    p = descent_argmin(inner_max, lambda p: central_gradient(inner_max, p), list(start))
    q = descent_argmax(lambda q: f(p, q), lambda q: central_gradient(lambda u: f(p, u), q),
                       list(start))
    return p + q
