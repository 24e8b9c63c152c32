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
