-- Set an account's console password and/or end its console sessions (svcgw.registry.credentials.Credentials).
-- KEYS[1]: the account's hash (keys.account)
-- KEYS[2]: the Redis key of the one console session to keep (keys.console_session), or a name
--         that never exists (keys.console_session(''))
-- ARGV[1]: the new password's argon2id hash, or '' to leave the password as it is
-- Raises the account's session_epoch: every session made under an older epoch is ended at its next
-- request (receiver.console.session). The session kept is moved to the new epoch in the same step,
-- so no request of it can fall between the two. A new password also records that epoch as
-- password_epoch, the password's version: device cookies carry the version they were made under,
-- and one made under another is no device cookie at sign-in (receiver.console.session).
-- Returns the new epoch, or -1 when there is no such account (nothing written).
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local epoch = redis.call('HINCRBY', KEYS[1], 'session_epoch', 1)
if ARGV[1] ~= '' then redis.call('HSET', KEYS[1], 'password', ARGV[1], 'password_epoch', epoch) end
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('HSET', KEYS[2], 'epoch', epoch)
end
return epoch
