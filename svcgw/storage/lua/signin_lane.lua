-- A sign-in of the known-browser lane: its login looked up and, when the login is the lane's
-- account under the password version the device cookie carries, the attempt reserved in its
-- windows, in one round trip (receiver.console.failures.FailureWindows.lane).
-- KEYS[1]: the login's key (keys.login), KEYS[2]: the lane account's hash (keys.account)
-- KEYS[3..]: the device's windows, then the address's (signin_reserve.lua's KEYS)
-- ARGV[1]: the lane's account, ARGV[2]: the password version its cookie carries
-- ARGV[3..]: signin_reserve.lua's ARGV (the attempt id, then per window its amount and length in ms)
-- Returns {account, password hash, password version, session epoch, taken, ms to wait}: account ''
-- for a login nobody has; taken -1 when nothing was reserved (the login is another account's, or
-- its password is of another version than the cookie's: the attempt leaves the lane), else
-- signin_reserve.lua's answer. The hash, version and epoch are '' when the login is another account's.
-- Runs after clock.lua and signin_reserve.lua's body, the latter wrapped as the local function
-- signin_reserve(KEYS, ARGV) (svcgw.storage.scripts). Every key is in KEYS, all of shard 0.
local account = redis.call('GET', KEYS[1])
if not account then return {'', '', '', '', -1, 0} end
if account ~= ARGV[1] then return {account, '', '', '', -1, 0} end
local found = redis.call('HMGET', KEYS[2], 'password', 'password_epoch', 'session_epoch')
local stored, version, epoch = found[1] or '', found[2] or '0', found[3] or '0'
if version ~= ARGV[2] then return {account, stored, version, epoch, -1, 0} end
local windows, args = {}, {}
for i = 3, #KEYS do windows[#windows + 1] = KEYS[i] end
for i = 3, #ARGV do args[#args + 1] = ARGV[i] end
local reserved = signin_reserve(windows, args)
return {account, stored, version, epoch, reserved[1], reserved[2]}
