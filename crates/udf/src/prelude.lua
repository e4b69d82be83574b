-- The Lua side of Bolide's UDF environment: the list, map and stream types
-- UDF modules use, logging helpers, and the sandbox. Loaded once into every
-- Lua state before any module. Written for Bolide; the API follows the
-- Aerospike UDF documentation.

local raw_pcall, raw_xpcall, raw_error = pcall, xpcall, error
local timed_out = bolide_timed_out
local resume = coroutine.resume

-- A protected call must not swallow the time limit: once the limit is
-- reached, the error goes on up.
pcall = function(...)
    local result = table.pack(raw_pcall(...))
    if not result[1] and timed_out() then
        raw_error(result[2], 0)
    end
    return table.unpack(result, 1, result.n)
end

xpcall = function(f, handler, ...)
    local result = table.pack(raw_xpcall(f, handler, ...))
    if not result[1] and timed_out() then
        raw_error(result[2], 0)
    end
    return table.unpack(result, 1, result.n)
end

coroutine.resume = function(...)
    local result = table.pack(resume(...))
    if not result[1] and timed_out() then
        raw_error(result[2], 0)
    end
    return table.unpack(result, 1, result.n)
end

-- Text chunks only: precompiled bytecode can break the interpreter.
local raw_load = load
load = function(chunk, name, _, env)
    return raw_load(chunk, name, 't', env)
end
loadstring = nil
dofile = nil
loadfile = nil

-- Lists: { _n = size, _v = { elements } }; elements may be nil.
List = {}

List.__index = function(l, i)
    if math.type(i) == 'integer' then
        return rawget(l, '_v')[i]
    end
    return nil
end

List.__newindex = function(l, i, v)
    if math.type(i) ~= 'integer' or i < 1 then
        raw_error('list index must be a positive integer', 2)
    end
    rawget(l, '_v')[i] = v
    if i > rawget(l, '_n') then
        rawset(l, '_n', i)
    end
end

List.__len = function(l)
    return rawget(l, '_n')
end

-- A value inside a list or map as the server writes it (as_val_tostring):
-- strings quoted, integers in decimal, floats as %.16g, nil as NIL, an
-- empty bytes value as <NULL>.
local function show(v)
    local kind = type(v)
    if kind == 'string' then
        return '"' .. v .. '"'
    elseif kind == 'nil' then
        return 'NIL'
    elseif kind == 'number' then
        if math.type(v) == 'integer' then
            return string.format('%d', v)
        end
        return string.format('%.16g', v)
    end
    local text = tostring(v)
    if text == 'Bytes()' then
        return '<NULL>'
    end
    return text
end

List.__tostring = function(l)
    local parts = {}
    local values = rawget(l, '_v')
    for i = 1, rawget(l, '_n') do
        parts[i] = show(values[i])
    end
    return '[' .. table.concat(parts, ', ') .. ']'
end

local function new_list()
    return setmetatable({ _n = 0, _v = {} }, List)
end

list = setmetatable({}, {
    __call = function(_, t)
        local l = new_list()
        if type(t) == 'table' and getmetatable(t) == nil then
            local values = rawget(l, '_v')
            for i = 1, #t do
                values[i] = t[i]
            end
            rawset(l, '_n', #t)
        end
        return l
    end,
})

local function check_list(l)
    if getmetatable(l) ~= List then
        raw_error('list expected', 3)
    end
    return rawget(l, '_v'), rawget(l, '_n')
end

function list.create(_)
    return new_list()
end

function list.size(l)
    local _, n = check_list(l)
    return n
end

function list.tostring(l)
    check_list(l)
    return tostring(l)
end

-- Bytes of the list serialized (msgpack, as the server stores it).
function list.nbytes(l)
    check_list(l)
    return bolide_nbytes(l)
end

function list.append(l, v)
    local values, n = check_list(l)
    values[n + 1] = v
    rawset(l, '_n', n + 1)
    return l
end

function list.prepend(l, v)
    local values, n = check_list(l)
    table.move(values, 1, n, 2)
    values[1] = v
    rawset(l, '_n', n + 1)
    return l
end

function list.insert(l, i, v)
    local values, n = check_list(l)
    if math.type(i) ~= 'integer' or i < 1 then
        raw_error('list index must be a positive integer', 2)
    end
    if i > n then
        values[i] = v
        rawset(l, '_n', i)
    else
        table.move(values, i, n, i + 1)
        values[i] = v
        rawset(l, '_n', n + 1)
    end
    return l
end

function list.remove(l, i)
    local values, n = check_list(l)
    if math.type(i) ~= 'integer' or i < 1 or i > n then
        return l
    end
    table.move(values, i + 1, n, i)
    values[n] = nil
    rawset(l, '_n', n - 1)
    return l
end

function list.get(l, i)
    local values = check_list(l)
    return values[i]
end

function list.set(l, i, v)
    l[i] = v
    return l
end

function list.take(l, count)
    local values, n = check_list(l)
    local taken = new_list()
    local out = rawget(taken, '_v')
    local m = math.max(0, math.min(n, count or 0))
    for i = 1, m do
        out[i] = values[i]
    end
    rawset(taken, '_n', m)
    return taken
end

function list.drop(l, count)
    local values, n = check_list(l)
    local kept = new_list()
    local out = rawget(kept, '_v')
    local skip = math.max(0, math.min(n, count or 0))
    for i = skip + 1, n do
        out[i - skip] = values[i]
    end
    rawset(kept, '_n', n - skip)
    return kept
end

function list.trim(l, count)
    local values, n = check_list(l)
    local m = math.max(0, math.min(n, count or n))
    for i = m + 1, n do
        values[i] = nil
    end
    rawset(l, '_n', m)
    return l
end

function list.clone(l)
    local values, n = check_list(l)
    local copy = new_list()
    local out = rawget(copy, '_v')
    for i = 1, n do
        out[i] = values[i]
    end
    rawset(copy, '_n', n)
    return copy
end

function list.concat(l, other)
    local _, n = check_list(l)
    local values, m = check_list(other)
    local out = rawget(l, '_v')
    for i = 1, m do
        out[n + i] = values[i]
    end
    rawset(l, '_n', n + m)
    return l
end

function list.merge(a, b)
    return list.concat(list.clone(a), b)
end

function list.iterator(l)
    local values, n = check_list(l)
    local i = 0
    return function()
        i = i + 1
        if i <= n then
            return values[i]
        end
        return nil
    end
end

function list.sort(l, descending)
    local values, n = check_list(l)
    local sorted = {}
    for i = 1, n do
        sorted[i] = values[i]
    end
    if descending then
        table.sort(sorted, function(a, b) return a > b end)
    else
        table.sort(sorted)
    end
    for i = 1, n do
        values[i] = sorted[i]
    end
    return l
end

-- Maps: { _k = { keys in insertion order }, _v = { [key] = value } }.
Map = {}

Map.__index = function(m, k)
    if k == nil then
        return nil
    end
    return rawget(m, '_v')[k]
end

local function map_set(m, k, v)
    local values = rawget(m, '_v')
    local keys = rawget(m, '_k')
    if v == nil then
        if values[k] ~= nil then
            values[k] = nil
            for i = 1, #keys do
                if keys[i] == k then
                    table.remove(keys, i)
                    break
                end
            end
        end
        return
    end
    if values[k] == nil then
        keys[#keys + 1] = k
    end
    values[k] = v
end

Map.__newindex = function(m, k, v)
    if k == nil then
        raw_error('map key must not be nil', 2)
    end
    map_set(m, k, v)
end

Map.__len = function(m)
    return #rawget(m, '_k')
end

Map.__tostring = function(m)
    local parts = {}
    local values = rawget(m, '_v')
    for i, k in ipairs(rawget(m, '_k')) do
        parts[i] = show(k) .. ':' .. show(values[k])
    end
    return '{' .. table.concat(parts, ', ') .. '}'
end

local function new_map()
    return setmetatable({ _k = {}, _v = {} }, Map)
end

map = setmetatable({}, {
    __call = function(_, t)
        local m = new_map()
        if type(t) == 'table' and getmetatable(t) == nil then
            for k, v in pairs(t) do
                map_set(m, k, v)
            end
        end
        return m
    end,
})

local function check_map(m)
    if getmetatable(m) ~= Map then
        raw_error('map expected', 3)
    end
    return rawget(m, '_k'), rawget(m, '_v')
end

function map.create(_)
    return new_map()
end

function map.size(m)
    local keys = check_map(m)
    return #keys
end

function map.tostring(m)
    check_map(m)
    return tostring(m)
end

-- Bytes of the map serialized (msgpack, as the server stores it).
function map.nbytes(m)
    check_map(m)
    return bolide_nbytes(m)
end

function map.pairs(m)
    local keys, values = check_map(m)
    local snapshot = table.move(keys, 1, #keys, 1, {})
    local i = 0
    return function()
        i = i + 1
        local k = snapshot[i]
        if k ~= nil then
            return k, values[k]
        end
        return nil
    end
end

map.iterator = map.pairs

function map.keys(m)
    local keys = check_map(m)
    local snapshot = table.move(keys, 1, #keys, 1, {})
    local i = 0
    return function()
        i = i + 1
        return snapshot[i]
    end
end

function map.values(m)
    local keys, values = check_map(m)
    local snapshot = table.move(keys, 1, #keys, 1, {})
    local i = 0
    return function()
        i = i + 1
        local k = snapshot[i]
        if k ~= nil then
            return values[k]
        end
        return nil
    end
end

function map.remove(m, k)
    check_map(m)
    if k ~= nil then
        map_set(m, k, nil)
    end
    return m
end

function map.clone(m)
    local keys, values = check_map(m)
    local copy = new_map()
    for _, k in ipairs(keys) do
        map_set(copy, k, values[k])
    end
    return copy
end

function map.merge(a, b, resolve)
    local merged = map.clone(a)
    local keys, values = check_map(b)
    local mine = rawget(merged, '_v')
    for _, k in ipairs(keys) do
        local v = values[k]
        if mine[k] ~= nil and type(resolve) == 'function' then
            v = resolve(mine[k], v)
        end
        map_set(merged, k, v)
    end
    return merged
end

function map.diff(a, b)
    local a_keys, a_values = check_map(a)
    local b_keys, b_values = check_map(b)
    local out = new_map()
    for _, k in ipairs(a_keys) do
        if b_values[k] == nil then
            map_set(out, k, a_values[k])
        end
    end
    for _, k in ipairs(b_keys) do
        if a_values[k] == nil then
            map_set(out, k, b_values[k])
        end
    end
    return out
end

function map.has_key(m, k)
    local _, values = check_map(m)
    return values[k] ~= nil
end

-- Logging: the level names of the server's UDF log.
function trace(fmt, ...) bolide_log(4, string.format(fmt, ...)) end
function debug(fmt, ...) bolide_log(3, string.format(fmt, ...)) end
function info(fmt, ...) bolide_log(2, string.format(fmt, ...)) end
function warn(fmt, ...) bolide_log(1, string.format(fmt, ...)) end

function math.sum(a, b) return a + b end
function math.product(a, b) return a * b end

-- Streams (aggregations): the module's function receives a stream, adds
-- operations to it and returns it; the server runs them up to and with
-- the first reduce, the client runs the rest.
local Stream = {}
Stream.__index = Stream

local function add_op(s, kind, a, b)
    local ops = rawget(s, 'ops')
    ops[#ops + 1] = { kind = kind, a = a, b = b }
    return s
end

function Stream:filter(predicate) return add_op(self, 'filter', predicate) end
function Stream:map(f) return add_op(self, 'map', f) end
function Stream:aggregate(init, f) return add_op(self, 'aggregate', init, f) end
function Stream:reduce(f) return add_op(self, 'reduce', f) end

function Stream:groupby(key_of)
    local function collect(groups, v)
        local k = key_of(v)
        local members = groups[k]
        if members == nil then
            members = list()
            groups[k] = members
        end
        list.append(members, v)
        return groups
    end
    local function combine(a, b)
        return map.merge(a, b, function(x, y) return list.merge(x, y) end)
    end
    return self:aggregate(map(), collect):reduce(combine)
end

local function stage(previous, op)
    if op.kind == 'filter' then
        return function()
            for v in previous do
                if op.a(v) then
                    return v
                end
            end
            return nil
        end
    elseif op.kind == 'map' then
        return function()
            local v = previous()
            if v == nil then
                return nil
            end
            return op.a(v)
        end
    else
        local done = false
        return function()
            if done then
                return nil
            end
            done = true
            local acc
            if op.kind == 'aggregate' then
                acc = op.a
                for v in previous do
                    acc = op.b(acc, v)
                end
            else
                acc = previous()
                if acc == nil then
                    return nil
                end
                for v in previous do
                    acc = op.a(acc, v)
                end
            end
            return acc
        end
    end
end

-- Runs the stream function `name` over the records `source` yields,
-- passing every output value to `emit`.
function bolide_run_stream(name, source, emit, ...)
    local f = _G[name]
    if type(f) ~= 'function' then
        raw_error('function not found', 0)
    end
    local s = f(setmetatable({ ops = {} }, Stream), ...)
    if getmetatable(s) ~= Stream then
        raw_error('the stream function must return its stream', 0)
    end
    local it = source
    for _, op in ipairs(rawget(s, 'ops')) do
        it = stage(it, op)
        if op.kind == 'reduce' then
            break
        end
    end
    for v in it do
        emit(v)
    end
end

-- Calls the record function `name`.
function bolide_run_record(name, ...)
    local f = _G[name]
    if type(f) ~= 'function' then
        raw_error('function not found', 0)
    end
    return f(...)
end
