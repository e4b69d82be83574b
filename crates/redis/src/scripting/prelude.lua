-- The environment Redis scripts run in, built once per Lua state: what
-- Redis 7.0 gives scripts on its Lua 5.1, on Lua 5.4. Runs with the base
-- library and `table`, `string`, `math` and `coroutine` loaded, and gets
-- the Rust side's functions in `native`. It returns the state's handles:
-- the table scripts' globals resolve to, the metatable of the real
-- globals, the runner (a protected call with Redis's error handler) and
-- the table of API slots the Rust side fills per run.
--
-- Every table a script can reach from its globals is read-only: the real
-- globals table stays empty (reads go to `backing` through its metatable,
-- every write fails), and the libraries are empty proxies of their own.
-- Functions that raise errors are Rust functions (`native`), so that a
-- script's `return redis.call(...)`, a tail call, keeps the script's frame
-- for the error's line, as Redis's C functions do.
local native = ...

local base = {
    assert = assert, collectgarbage = collectgarbage, error = error,
    getmetatable = getmetatable, ipairs = ipairs, load = load, next = next,
    pairs = pairs, pcall = pcall, rawequal = rawequal, rawget = rawget,
    rawlen = rawlen, rawset = rawset, select = select,
    setmetatable = setmetatable, tonumber = tonumber, tostring = tostring,
    type = type, xpcall = xpcall,
}
local error, type, select, setmetatable, tostring = error, type, select, setmetatable, tostring
local next, math, table, string, coroutine, collectgarbage =
    next, math, table, string, coroutine, collectgarbage
local table_unpack, table_pack = table.unpack, table.pack
local string_metatable = getmetatable("")
local coroutine_resume, coroutine_wrap = coroutine.resume, coroutine.wrap

local READONLY = "Attempt to modify a readonly table"

-- Tables a script may not change (weak keys: proxies die with their state).
local protected = setmetatable({}, { __mode = "k" })

local function refuse()
    error(READONLY, 2)
end

-- An empty table reading through to `t`: writes fail, pairs and # see `t`.
local function readonly(t)
    local proxy = {}
    base.setmetatable(proxy, {
        __index = t,
        __newindex = refuse,
        __pairs = function() return next, t, nil end,
        __len = function() return #t end,
        __metatable = false,
    })
    protected[proxy] = true
    return proxy
end

-- Errors raised by a library as Lua 5.1's luaL_error raises them: with the
-- position of the script line that called it.
local function raise(message)
    error(message, 3)
end

-- After SCRIPT KILL, a protected call must not swallow the kill: every
-- protected call re-raises it when it returns. An error it catches reads
-- as Redis 7.0's pcall gives it: a reply error as its text.
local function check_kill(...)
    if native.killed() then
        error(native.kill_error(), 0)
    end
    return ...
end

local function settle_pcall(ok, ...)
    check_kill()
    if ok then
        return ok, ...
    end
    return false, native.pcall_error((...))
end

local function guarded_pcall(f, ...)
    return settle_pcall(base.pcall(f, ...))
end

local function guarded_xpcall(f, handler, ...)
    local function handle(e)
        return handler(native.error_value(e))
    end
    return check_kill(base.xpcall(f, handle, ...))
end

-- ---- redis ----------------------------------------------------------------

local function error_table(text)
    return native.error_table(text)
end

-- call, pcall, setresp and acl_check_cmd are set for each run (they
-- reach the running script's client); the rest is here.
local redis = {}

function redis.error_reply(...)
    local text = ...
    if select("#", ...) ~= 1 or type(text) ~= "string" then
        return error_table("wrong number or type of arguments")
    end
    if text:sub(1, 1) ~= "-" then
        text = "-" .. text
    end
    return error_table(text)
end

function redis.status_reply(...)
    local text = ...
    if select("#", ...) ~= 1 or type(text) ~= "string" then
        return error_table("wrong number or type of arguments")
    end
    return { ok = text }
end

redis.sha1hex = native.sha1hex
redis.log = native.log
redis.set_repl = native.set_repl

function redis.replicate_commands()
    return true
end

function redis.breakpoint()
    return false
end

function redis.debug()
end

redis.REDIS_VERSION = native.version
redis.REDIS_VERSION_NUM = native.version_num
redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING = 0, 1, 2, 3
redis.REPL_NONE, redis.REPL_AOF, redis.REPL_SLAVE, redis.REPL_REPLICA, redis.REPL_ALL = 0, 1, 2, 2, 3

-- ---- bit (LuaBitOp: 32-bit operations on numbers) --------------------------

local function tobit(x)
    local n = base.tonumber(x)
    if n == nil then
        raise("bad argument #1 to 'tobit' (number expected, got " .. type(x) .. ")")
    end
    if math.type(n) == "float" then
        if n ~= n or n == math.huge or n == -math.huge then
            return 0
        end
        n = math.floor(n + 0.5)
        n = math.tointeger(n % 4294967296) or 0
    end
    n = n & 0xffffffff
    if n >= 0x80000000 then
        n = n - 0x100000000
    end
    return n
end

local function u32(x)
    return tobit(x) & 0xffffffff
end

local bit = {}
bit.tobit = tobit
function bit.bnot(x) return tobit(~u32(x)) end
function bit.band(x, ...)
    local r = u32(x)
    for i = 1, select("#", ...) do r = r & u32((select(i, ...))) end
    return tobit(r)
end
function bit.bor(x, ...)
    local r = u32(x)
    for i = 1, select("#", ...) do r = r | u32((select(i, ...))) end
    return tobit(r)
end
function bit.bxor(x, ...)
    local r = u32(x)
    for i = 1, select("#", ...) do r = r ~ u32((select(i, ...))) end
    return tobit(r)
end
function bit.lshift(x, n) return tobit(u32(x) << (u32(n) & 31)) end
function bit.rshift(x, n) return tobit(u32(x) >> (u32(n) & 31)) end
function bit.arshift(x, n)
    local v, s = tobit(x), u32(n) & 31
    return tobit(v >> s | (v < 0 and s > 0 and (0xffffffff << (32 - s)) or 0))
end
function bit.rol(x, n)
    local v, s = u32(x), u32(n) & 31
    return tobit(v << s | v >> (32 - s))
end
function bit.ror(x, n)
    local v, s = u32(x), u32(n) & 31
    return tobit(v >> s | v << (32 - s))
end
function bit.bswap(x)
    local v = u32(x)
    return tobit((v & 0xff) << 24 | (v & 0xff00) << 8 | (v >> 8) & 0xff00 | (v >> 24) & 0xff)
end
function bit.tohex(x, n)
    local v = u32(x)
    n = n == nil and 8 or tobit(n)
    local digits = "0123456789abcdef"
    if n < 0 then
        n = -n
        digits = "0123456789ABCDEF"
    end
    if n > 8 then n = 8 end
    local out = {}
    for i = n, 1, -1 do
        local d = v & 15
        out[i] = digits:sub(d + 1, d + 1)
        v = v >> 4
    end
    return table.concat(out)
end

-- ---- cjson, cmsgpack, struct (native) -------------------------------------

local cjson = {
    encode = native.json_encode,
    decode = native.json_decode,
    null = native.null,
    _NAME = "cjson",
    _VERSION = "2.1.0",
}
function cjson.encode_keep_buffer() return true end
function cjson.encode_max_depth() return 1000 end
function cjson.decode_max_depth() return 1000 end
function cjson.encode_number_precision() return 14 end
function cjson.encode_invalid_numbers() return false end
function cjson.decode_invalid_numbers() return true end
function cjson.encode_sparse_array() return false, 2, 10 end

local cmsgpack = {
    pack = native.msgpack_pack,
    unpack = native.msgpack_unpack,
    unpack_one = native.msgpack_unpack_one,
    unpack_limit = native.msgpack_unpack_limit,
    _NAME = "cmsgpack",
    _VERSION = "lua-cmsgpack 0.4.0",
}

local struct = {
    pack = native.struct_pack,
    unpack = native.struct_unpack,
    size = native.struct_size,
}

-- ---- Lua 5.1 names on Lua 5.4 --------------------------------------------

string.gfind = string.gmatch

local lua51_table = {}
for name, f in base.pairs(table) do lua51_table[name] = f end
function lua51_table.getn(t) return #t end
function lua51_table.maxn(t)
    local max = 0
    for k in base.pairs(t) do
        if type(k) == "number" and k > max then max = k end
    end
    return max
end
function lua51_table.foreach(t, f)
    for k, v in base.pairs(t) do
        local r = f(k, v)
        if r ~= nil then return r end
    end
end
function lua51_table.foreachi(t, f)
    for i = 1, #t do
        local r = f(i, t[i])
        if r ~= nil then return r end
    end
end

local lua51_math = {}
for name, f in base.pairs(math) do lua51_math[name] = f end
function lua51_math.pow(x, y) return x ^ y end
function lua51_math.log10(x) return math.log(x, 10) end
function lua51_math.ldexp(m, e) return m * 2.0 ^ e end
function lua51_math.frexp(x)
    if x == 0 or x ~= x or x == math.huge or x == -math.huge then return x, 0 end
    local e = math.floor(math.log(math.abs(x), 2)) + 1
    local m = x / 2.0 ^ e
    if math.abs(m) >= 1 then m, e = m / 2, e + 1 end
    if math.abs(m) < 0.5 then m, e = m * 2, e - 1 end
    return m, e
end
lua51_math.mod = math.fmod

local lua51_coroutine = {}
for name, f in base.pairs(coroutine) do lua51_coroutine[name] = f end
local function settle_resume(ok, ...)
    check_kill()
    if ok then
        return ok, ...
    end
    return false, native.error_value((...))
end
function lua51_coroutine.resume(co, ...)
    return settle_resume(coroutine_resume(co, ...))
end
function lua51_coroutine.wrap(f)
    local wrapped = coroutine_wrap(f)
    return function(...)
        return check_kill(wrapped(...))
    end
end

-- load takes a reader function (Lua 5.1's load; native.load refuses a
-- string at the caller's line), loadstring a string; both compile text
-- only (never bytecode), with the protected globals.
local function text_loadstring(chunk, name)
    if type(chunk) ~= "string" then
        return nil
    end
    return base.load(chunk, name or chunk, "t")
end

local function guarded_rawset(t, k, v)
    if protected[t] then
        error(READONLY, 0)
    end
    return base.rawset(t, k, v)
end

-- Lua 5.1 prints floats with 14 significant digits and no ".0".
local function lua51_tostring(value)
    if math.type(value) == "float" and value == value and value ~= math.huge and value ~= -math.huge then
        return string.format("%.14g", value)
    end
    return base.tostring(value)
end

local function gcinfo()
    return math.floor(collectgarbage("count"))
end

-- ---- the globals ----------------------------------------------------------

local backing = {}
backing.assert = base.assert
backing.collectgarbage = base.collectgarbage
backing.error = base.error
backing.gcinfo = gcinfo
backing.getmetatable = base.getmetatable
backing.ipairs = base.ipairs
backing.load = native.load
backing.loadstring = text_loadstring
backing.next = base.next
backing.pairs = base.pairs
backing.pcall = guarded_pcall
backing.rawequal = base.rawequal
backing.rawget = base.rawget
backing.rawset = guarded_rawset
backing.select = base.select
backing.setmetatable = base.setmetatable
backing.tonumber = base.tonumber
backing.tostring = lua51_tostring
backing.type = base.type
backing.unpack = table_unpack
backing.xpcall = guarded_xpcall
backing._VERSION = "Lua 5.1"
backing.string = readonly(string)
backing.table = readonly(lua51_table)
backing.math = readonly(lua51_math)
backing.coroutine = readonly(lua51_coroutine)
backing.bit = readonly(bit)
backing.cjson = readonly(cjson)
backing.cmsgpack = readonly(cmsgpack)
backing.struct = readonly(struct)
backing.redis = readonly(redis)

local function missing_global(_, name)
    error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
end
local globals = _G
backing._G = globals
base.setmetatable(backing, { __index = missing_global, __newindex = refuse, __metatable = false })
local globals_meta = { __index = backing, __newindex = refuse, __metatable = false }
globals_meta.__pairs = function() return next, backing, nil end
for name in base.pairs(base) do globals[name] = nil end
for _, name in base.ipairs({
    "_G", "_VERSION", "coroutine", "dofile", "loadfile", "math", "print",
    "require", "string", "table", "utf8", "warn", "os", "io", "package", "debug",
}) do
    globals[name] = nil
end
for name in base.pairs(globals) do globals[name] = nil end
base.setmetatable(globals, globals_meta)
protected[globals] = true
protected[backing] = true

-- Strings' methods go through the read-only `string` proxy too.
string_metatable.__index = backing.string
string_metatable.__metatable = readonly({ __index = backing.string })

-- The globals a library sees while FUNCTION LOAD runs it: `redis` with
-- only register_function, log and the constants.
local load_redis = {
    log = redis.log,
    REDIS_VERSION = redis.REDIS_VERSION,
    REDIS_VERSION_NUM = redis.REDIS_VERSION_NUM,
    LOG_DEBUG = 0, LOG_VERBOSE = 1, LOG_NOTICE = 2, LOG_WARNING = 3,
}
base.setmetatable(load_redis, { __index = missing_global, __newindex = refuse, __metatable = false })
protected[load_redis] = true
local load_globals = { redis = load_redis }
base.setmetatable(load_globals, { __index = missing_global, __newindex = refuse, __metatable = false })
protected[load_globals] = true

local handler = native.error_handler
local function run(f, ...)
    return base.xpcall(f, handler, ...)
end

return backing, globals_meta, run, redis, load_redis, load_globals
